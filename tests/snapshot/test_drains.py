"""Drains in the SQLite snapshot (snapshot/drains.py): the drained hash is written when it
changed, and a Redis that lost its data gets it back, so a node drained for maintenance
stays drained (a file from before drains: test_tables.py)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import redis

from scheduler.config import Settings
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import write_snapshot
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, assert_json, register, submit
from tests.snapshot_helpers import lose_redis_data


def drain_rows(path: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT node, drained_by FROM drains").fetchall())


def test_drains_survive_a_snapshot_and_a_redis_that_lost_its_data(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, db: Path
) -> None:
    api = make_client(settings)
    register(api, "n1", "n2", "n3")
    submit(api, command="x")
    assert_json(api.post("/nodes/n1/drain"))
    assert_json(api.post("/nodes/n2/drain", json={"by": "stopping"}))
    write_snapshot(settings)
    assert drain_rows(db) == {"n1": "operator", "n2": "stopping"}

    # Nothing changed: the table is not written again (its rows stay as they are).
    keys = Keys(settings.redis_prefix)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("INSERT INTO drains VALUES ('marker', 'x')")
        conn.commit()
    write_snapshot(settings)
    assert "marker" in drain_rows(db)
    # An undrain is a change: the whole table is the hash again.
    assert_json(api.post("/nodes/n2/undrain"))
    write_snapshot(settings)
    assert drain_rows(db) == {"n1": "operator"}

    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert rclient.hgetall(keys.drained_nodes) == {b"n1": b"operator"}
    # The restored drain holds: the nodes come back (their agents register again) and
    # n1 gets no new job.
    api = make_client(settings)
    register(api, "n1", "n2", "n3")
    placed = {submit(api, command="y")["node_id"] for _ in range(4)}
    assert placed == {"n2", "n3"}

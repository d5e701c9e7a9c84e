"""Quotas in the SQLite snapshot (snapshot/quotas.py): the quotas hash is written when it
changed, and a Redis that lost its data gets it back with the jobs, so every namespace keeps
its limits and a namespace's running use is made again from its jobs (a file from before
quotas: test_tables.py)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import redis

from scheduler.config import Settings
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import write_snapshot
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, assert_json, register, report, submit
from tests.places import expected, place_of
from tests.snapshot_helpers import lose_redis_data


def quota_rows(path: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT namespace, quota FROM quotas").fetchall())


def test_quotas_survive_a_snapshot_and_a_redis_that_lost_its_data(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, db: Path
) -> None:
    api = make_client(settings)
    register(api, "n1")
    assert_json(api.put("/namespaces/team-a/quota", json={"running": 1, "pending": 5}))
    assert_json(api.put("/namespaces/default/quota", json={"cpus": 4}))
    running = submit(api, command="x", namespace="team-a", cpus=1)["job_id"]
    assert report(api, running, "running").status_code == 200
    write_snapshot(settings)
    assert quota_rows(db) == {"team-a": '{"running":1,"pending":5}', "": '{"cpus":4}'}
    # Nothing changed: the table is not written again.
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("INSERT INTO quotas VALUES ('marker', '{}')")
        conn.commit()
    write_snapshot(settings)
    assert "marker" in quota_rows(db)
    assert_json(api.put("/namespaces/default/quota", json={}))
    write_snapshot(settings)
    assert quota_rows(db) == {"team-a": '{"running":1,"pending":5}'}

    keys = Keys(settings.redis_prefix)
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert rclient.hgetall(keys.quotas) == {b"team-a": b'{"running":1,"pending":5}'}
    assert rclient.hgetall(keys.namespace_held("team-a")) == {b"cpus": b"1"}
    # The restored quota holds: team-a runs its one job, so the next waits.
    api = make_client(settings)
    register(api, "n1")
    waiting = submit(api, command="y", namespace="team-a")["job_id"]
    refused = report(api, waiting, "running")
    assert (refused.status_code, refused.text) == (409, "job waits for its namespace's quota\n")
    assert assert_json(api.get(f"/jobs/{waiting}"))["pending_reason"] == "quota"


def test_a_restored_job_waiting_for_quota_waits_for_it_again(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, db: Path
) -> None:
    """A job waiting for its namespace's quota is put back in the namespace's waiting queue,
    not among the unplaced jobs (placement would place it past the quota)."""
    api = make_client(settings)
    register(api, "n1")
    assert_json(api.put("/namespaces/team-a/quota", json={"running": 1}))
    first, held = (submit(api, command="x", namespace="team-a")["job_id"] for _ in range(2))
    assert report(api, first, "running").status_code == 200
    refused = report(api, held, "running")
    assert refused.status_code == 409
    write_snapshot(settings)

    keys = Keys(settings.redis_prefix)
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert rclient.zrange(keys.over_quota("team-a"), 0, -1) == [held.encode()]
    assert rclient.zscore(keys.unplaced, held) is None
    assert place_of(rclient, keys, held) == expected(
        keys, "pending", "", namespace="team-a", over_quota=True
    )


def test_a_restored_job_waiting_for_quota_is_woken_once_it_fits(
    make_client: ClientFactory,
    settings: Settings,
    rclient: redis.Redis,
    db: Path,
    store: SyncJobStore,
) -> None:
    """A snapshot written after the room its namespace freed and before the placement pass
    woke the waiting job (what freed it, quota_freed, is not kept): the restore has the next
    pass wake it, else it would wait with nothing of its namespace left to end."""
    api = make_client(settings)
    register(api, "n1")
    assert_json(api.put("/namespaces/team-a/quota", json={"running": 1}))
    first, held = (submit(api, command="x", namespace="team-a")["job_id"] for _ in range(2))
    assert report(api, first, "running").status_code == 200
    assert report(api, held, "running").status_code == 409  # it waits for quota
    assert report(api, first, "done", exit_code=0).status_code == 200  # room freed
    write_snapshot(settings)  # before the placement pass
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    register(api, "n1")  # its agent registers again after the loss
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [held]
    job = assert_json(api.get(f"/jobs/{held}"))
    assert (job["node_id"], job.get("pending_reason", "")) == ("n1", "")

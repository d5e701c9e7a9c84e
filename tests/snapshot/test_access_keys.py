"""Named keys and the audit stream in the SQLite snapshot (snapshot/access_keys.py): written
when they changed, and put back into a Redis that lost its data, so no team is locked out
and who did what is not forgotten; a file from before them restores with none."""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import write_snapshot
from scheduler.store.keys import Keys
from tests.api.test_roles import as_key
from tests.api.test_roles import make_key as named_key
from tests.conftest import ClientFactory, SettingsFactory, register
from tests.snapshot_helpers import lose_redis_data

KEY = secrets.token_urlsafe(32)
ADMIN = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(api_key=KEY)


def rows(path: Path, query: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(query).fetchall()


def make_key(api: TestClient, name: str, role: str = "submitter") -> dict[str, str]:
    return as_key(named_key(api, name, role, ADMIN))


def test_keys_and_the_audit_survive_a_snapshot_and_a_redis_that_lost_its_data(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, db: Path
) -> None:
    api = make_client(settings)
    register(api, "n1")
    kept, gone = make_key(api, "kept"), make_key(api, "gone")
    assert api.post("/jobs", json={"command": "x"}, headers=kept).status_code == 201
    assert api.delete("/keys/gone", headers=ADMIN).status_code == 204
    write_snapshot(settings)
    assert [name for (name,) in rows(db, "SELECT name FROM api_keys")] == ["kept"]
    assert len(rows(db, "SELECT * FROM audit")) == 3  # two made, one revoked
    # Nothing changed: the table is not written again.
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("INSERT INTO api_keys VALUES ('marker', '{}')")
        conn.commit()
    write_snapshot(settings)
    assert ("marker",) in rows(db, "SELECT name FROM api_keys")
    make_key(api, "later")
    write_snapshot(settings)
    assert rows(db, "SELECT name FROM api_keys ORDER BY name") == [("kept",), ("later",)]
    assert len(rows(db, "SELECT * FROM audit")) == 4

    keys = Keys(settings.redis_prefix)
    audit_before = rclient.xrange(keys.audit)
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert rclient.xrange(keys.audit) == audit_before
    api = make_client(settings)  # a new process: it reads the keys restored
    register(api, "n1")
    assert api.get("/jobs/job-1", headers=kept).json()["submitted_by"] == "kept"
    assert api.post("/jobs", json={"command": "y"}, headers=kept).status_code == 201
    assert api.get("/jobs/job-1", headers=gone).status_code == 401


def test_a_file_from_before_named_keys_restores_with_none(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, db: Path
) -> None:
    api = make_client(settings)
    make_key(api, "k")
    write_snapshot(settings)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TABLE api_keys")
        conn.execute("DROP TABLE audit")
        conn.commit()
    lose_redis_data(rclient, settings.redis_prefix)
    restore_if_empty(settings)  # no job: nothing but the marker is put back
    keys = Keys(settings.redis_prefix)
    assert rclient.exists(keys.initialised) == 1
    assert rclient.exists(keys.api_keys, keys.audit) == 0


def test_a_key_made_or_revoked_on_a_redis_that_lost_its_data_restores_the_file_first(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, db: Path
) -> None:
    """The admin's first call after Redis lost its data (a key made, or one revoked) brings
    the snapshot back first, as a job's submission does: made on the empty Redis, it kept
    the restore from putting the file's keys back (Redis held some), and the next snapshot
    wrote the file's table over with the one key made: every team locked out for good."""
    api = make_client(settings)
    kept, gone = make_key(api, "kept"), make_key(api, "gone")
    write_snapshot(settings)
    lose_redis_data(rclient, settings.redis_prefix)
    newcomer = make_key(api, "newcomer")  # the same process, no restore run yet
    assert api.delete("/keys/gone", headers=ADMIN).status_code == 204
    write_snapshot(settings)
    assert rows(db, "SELECT name FROM api_keys ORDER BY name") == [("kept",), ("newcomer",)]
    api = make_client(settings)  # a new process: it reads the keys as Redis holds them
    register(api, "n1")
    for works in (kept, newcomer):
        assert api.post("/jobs", json={"command": "x"}, headers=works).status_code == 201
    assert api.get("/jobs/job-1", headers=gone).status_code == 401

"""Schedules in the SQLite snapshot (snapshot/schedules.py): every schedule is written, a
deleted one's row goes, and a Redis that lost its data gets them back, state included, due
again as they were (or not, when paused); a file holding schedules and no job restores too."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any, cast

import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.nodes.registry import BuiltinRegistry
from scheduler.snapshot.restore import restore_from_file, restore_if_empty
from scheduler.snapshot.writer import write_snapshot
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, CtxFactory, register
from tests.snapshot_helpers import lose_redis_data
from workers import firing


def schedule_rows(path: Path) -> dict[str, bytes]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {name: record.encode() for name, record in conn.execute("SELECT * FROM schedules")}


def schedules_in_redis(r: redis.Redis, keys: Keys) -> dict[str, bytes]:
    raw = cast(dict[bytes, bytes], r.hgetall(keys.schedules))
    return {k.decode(): v for k, v in raw.items()}


def add(api: TestClient, name: str, **fields: Any) -> None:
    body = {"name": name, "every_secs": 60, "job": {"command": name}, **fields}
    assert api.post("/schedules", json=body).status_code == 201


def test_schedules_survive_a_snapshot_and_a_redis_that_lost_its_data(
    make_ctx: CtxFactory, make_client: ClientFactory, rclient: redis.Redis, db: Path
) -> None:
    ctx = make_ctx(node_ttl_secs=86400)
    settings, keys = ctx.settings, ctx.keys
    api = make_client(settings)
    register(api, "n1")
    add(api, "every-minute", catchup="once")
    add(api, "nightly", every_secs=0, cron="0 3 * * *", timezone="Asia/Tokyo")
    add(api, "held", paused=True)
    add(api, "doomed")
    tick = rclient.zscore(keys.schedules_due, "every-minute")
    assert tick is not None
    asyncio.run(firing.fire_due(ctx, tick, BuiltinRegistry()))  # state: last job, next tick
    assert api.delete("/schedules/doomed").status_code == 204

    write_snapshot(settings)
    shown = api.get("/schedules").json()
    assert shown[0]["last_job_id"].startswith("job-")
    before = schedules_in_redis(rclient, keys)
    assert schedule_rows(db) == before and set(before) == {"every-minute", "nightly", "held"}
    assert rclient.scard(keys.schedules_dirty) == rclient.scard(keys.schedules_dirty_inflight) == 0
    due_before = rclient.zrange(keys.schedules_due, 0, -1, withscores=True)

    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert schedules_in_redis(rclient, keys) == before
    assert rclient.zrange(keys.schedules_due, 0, -1, withscores=True) == due_before
    assert rclient.zscore(keys.schedules_due, "held") is None
    assert [n.decode() for n in rclient.zrange(keys.schedule_names, 0, -1)] == sorted(before)
    assert make_client(settings).get("/schedules").json() == shown


def test_a_deleted_schedule_leaves_the_file(
    make_client: ClientFactory, settings: Settings, db: Path
) -> None:
    api = make_client(settings)
    add(api, "a")
    add(api, "b")
    write_snapshot(settings)
    assert set(schedule_rows(db)) == {"a", "b"}
    assert api.delete("/schedules/a").status_code == 204
    assert api.post("/schedules/b/pause").status_code == 200
    write_snapshot(settings)
    rows = schedule_rows(db)
    assert set(rows) == {"b"} and b'"paused":true' in rows["b"]


def test_a_file_with_schedules_and_no_job_restores_them(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis
) -> None:
    api = make_client(settings)
    add(api, "only")
    write_snapshot(settings)
    lose_redis_data(rclient, settings.redis_prefix)
    restore_if_empty(settings)
    keys = Keys(settings.redis_prefix)
    assert (
        rclient.get(keys.initialised)
        == f"restored 1 schedules from {settings.scheduler_db}".encode()
    )
    assert set(schedules_in_redis(rclient, keys)) == {"only"}
    assert rclient.zscore(keys.schedules_due, "only") is not None


def test_restore_from_another_file_brings_schedules_and_marks_them_for_the_snapshot(
    make_client: ClientFactory, make_settings: Any, rclient: redis.Redis, tmp_path: Path
) -> None:
    other = tmp_path / "other.db"
    first = make_settings(scheduler_db=str(other))
    api = make_client(first)
    add(api, "moved")
    register(api, "n1")
    assert api.post("/jobs", json={"command": "x"}).status_code == 201
    write_snapshot(first)
    lose_redis_data(rclient, first.redis_prefix)
    report = restore_from_file(make_settings(), str(other))
    assert report.jobs == 1
    keys = Keys(first.redis_prefix)
    assert set(schedules_in_redis(rclient, keys)) == {"moved"}
    assert rclient.sismember(keys.schedules_dirty, "moved")  # reaches SCHEDULER_DB next

"""Firing schedules (workers/firing.py) in-process against the real redis-server, the time
injected: one job per tick, two firers on one tick, a firer dying between the create and the
advance, no healthy node, the catch-up policies, a pause racing a firing."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any, cast

import httpx
import pytest
from starlette.testclient import TestClient

from scheduler.models.schedule import Schedule, schedule_decoder
from scheduler.nodes.registry import BuiltinRegistry
from scheduler.store import ops
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, CtxFactory, assert_json, register
from workers import firing
from workers.context import Context

GRACE = 60


@pytest.fixture
def ctx_overrides() -> dict[str, Any]:
    # Nodes stay live for the injected times; the grace as the tests count it.
    return {"node_ttl_secs": 86400, "max_jobs_per_node": 1000, "schedule_grace_secs": GRACE}


@pytest.fixture
def ctx(make_ctx: CtxFactory) -> Context:
    return make_ctx()


@pytest.fixture
def api(make_client: ClientFactory, ctx: Context) -> TestClient:
    client = make_client(ctx.settings)
    register(client, "n1")
    return client


def add(api: TestClient, name: str = "s", **fields: Any) -> None:
    body = {"name": name, "every_secs": 10, "job": {"command": f"run {name}"}, **fields}
    response = api.post("/schedules", json=body)
    assert response.status_code == 201, response.text


def stored(ctx: Context, name: str = "s") -> Schedule:
    raw = cast(bytes, ctx.redis.hget(ctx.keys.schedules, name))
    return schedule_decoder.decode(raw)


def fire(ctx: Context, now: float) -> Counter[str]:
    return asyncio.run(firing.fire_due(ctx, now, BuiltinRegistry()))


def jobs(api: TestClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = assert_json(api.get("/jobs"))
    return found


def test_a_tick_makes_one_job_and_the_schedule_goes_on(ctx: Context, api: TestClient) -> None:
    add(api, job={"command": "echo hi", "env_vars": {"A": "1"}})
    tick = stored(ctx).next_tick
    assert fire(ctx, tick - 1) == Counter()  # not due yet
    assert fire(ctx, tick + 0.5) == Counter(schedule_fired=1)
    made = jobs(api)
    assert len(made) == 1 and made[0]["command"] == "echo hi"
    assert made[0]["env_vars"] == {"A": "1"} and made[0]["status"] == "pending"
    assert made[0]["schedule"] == "s"  # its origin, on its record (issue 38)
    page = api.get("/ui/jobs/job-1").text
    assert '<th>made by</th><td>schedule <a id="schedule" href="/ui/schedules#row-s">s</a>' in page
    after = stored(ctx)
    assert (after.next_tick, after.last_tick, after.last_job_id) == (tick + 10, tick, "job-1")
    assert ctx.redis.zscore(ctx.keys.schedules_due, "s") == tick + 10
    assert fire(ctx, tick + 0.5) == Counter()  # the same time again: nothing due
    view = api.get("/schedules/s").json()
    assert view["last_job_id"] == "job-1" and view["last_run_at"]


def test_two_firers_on_one_tick_make_one_job(ctx: Context, api: TestClient) -> None:
    """Both read the due schedule before either advanced it."""
    add(api)
    tick = stored(ctx).next_tick
    [seen] = ctx.store.run(ops.schedules.due_schedules(tick, 0, 10))
    nodes = BuiltinRegistry()
    first = asyncio.run(firing.fire_one(ctx, seen, tick, nodes))
    second = asyncio.run(firing.fire_one(ctx, seen, tick, nodes))
    assert (first, second) == ("schedule_fired", "schedule_raced")
    assert len(jobs(api)) == 1 and stored(ctx).next_tick == tick + 10


def test_many_firers_at_once_make_one_job_per_tick(ctx: Context, api: TestClient) -> None:
    """Four firers, each with its own connection, at once on 50 schedules with ticks due."""
    names = [f"s{i:02}" for i in range(50)]
    for name in names:
        add(api, name, every_secs=1)
    first = {name: stored(ctx, name).next_tick for name in names}
    now = max(first.values()) + 4.5  # 5 or more ticks due each, all within the grace
    firers = [
        Context(ctx.settings, SyncJobStore.connect(ctx.settings), httpx.Client()) for _ in range(4)
    ]
    barrier = threading.Barrier(len(firers))
    totals: list[Counter[str]] = []

    def run(firer: Context) -> None:
        barrier.wait()
        totals.append(fire(firer, now))

    threads = [threading.Thread(target=run, args=(f,)) for f in firers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for firer in firers:
        firer.close()
    made = Counter(job["command"] for job in jobs(api))
    for name in names:
        assert made[f"run {name}"] == int(now) - first[name] + 1, name
        assert stored(ctx, name).next_tick == int(now) + 1
    # Each job was made by exactly one firer; the others found it (or lost the race).
    assert sum(t["schedule_fired"] for t in totals) == sum(made.values())


def test_a_firer_killed_between_create_and_advance_leaves_one_job(
    ctx: Context, api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(api)
    tick = stored(ctx).next_tick

    def die(*args: Any) -> bool:
        raise SystemExit("killed between the create and the advance")

    with monkeypatch.context() as patched:
        patched.setattr(ops.schedules, "replace_schedule", die)
        with pytest.raises(SystemExit):
            fire(ctx, tick)
    assert len(jobs(api)) == 1 and stored(ctx).next_tick == tick  # still due
    assert fire(ctx, tick + 1) == Counter(schedule_duplicates=1)
    assert len(jobs(api)) == 1
    after = stored(ctx)
    assert (after.next_tick, after.last_job_id) == (tick + 10, "job-1")


def test_without_a_healthy_node_the_tick_waits_then_fires_once(
    ctx: Context, make_client: ClientFactory
) -> None:
    api = make_client(ctx.settings)  # no node registered
    add(api)
    tick = stored(ctx).next_tick
    assert fire(ctx, tick) == Counter(schedule_unplaced=1)
    assert fire(ctx, tick + 5) == Counter(schedule_unplaced=1)
    assert jobs(api) == [] and stored(ctx).next_tick == tick
    register(api, "n1")
    assert fire(ctx, tick + 7) == Counter(schedule_fired=1)
    assert len(jobs(api)) == 1 and stored(ctx).next_tick == tick + 10


@pytest.mark.parametrize(("catchup", "extra"), [("skip", 0), ("once", 1)])
def test_after_an_outage_the_policy_decides_the_missed_ticks(
    ctx: Context, api: TestClient, catchup: str, extra: int
) -> None:
    """Every 10 s, fired 1000 s late with a 60 s grace: the 7 ticks 60 s late or less fire
    (now - 60 .. now), the 94 before them are skipped or made into one job."""
    add(api, catchup=catchup)
    tick = stored(ctx).next_tick
    now = tick + 1000
    counts = fire(ctx, now)
    on_time = len(range(tick + 940, now + 1, 10))
    assert len(jobs(api)) == on_time + extra
    expected = Counter(schedule_fired=on_time)
    expected["schedule_skipped" if catchup == "skip" else "schedule_caught_up"] += 1
    assert counts == expected
    assert stored(ctx).next_tick == now + 10


def test_a_pause_that_wins_the_race_keeps_the_schedule_paused(
    ctx: Context, api: TestClient
) -> None:
    add(api)
    tick = stored(ctx).next_tick
    [seen] = ctx.store.run(ops.schedules.due_schedules(tick, 0, 10))
    assert api.post("/schedules/s/pause").status_code == 200
    # The tick's job is made (the firer read the schedule before the pause), but its advance
    # finds the record changed: the schedule stays paused.
    assert asyncio.run(firing.fire_one(ctx, seen, tick, BuiltinRegistry())) == "schedule_fired"
    assert len(jobs(api)) == 1
    assert stored(ctx).paused and ctx.redis.zscore(ctx.keys.schedules_due, "s") is None
    assert fire(ctx, tick + 100) == Counter()


def test_the_task_runs_on_redis_time_and_logs_its_run(ctx: Context, api: TestClient) -> None:
    from workers import tasks

    add(api, every_secs=1)
    counts = tasks.fire_schedules(7)
    assert set(counts) <= {"schedule_fired"}
    runs = cast(list[bytes], ctx.redis.lrange(ctx.keys.runs("schedules"), 0, -1))
    assert [r.split()[0] for r in runs] == [b"7"]


def test_a_deleted_schedule_no_longer_fires(ctx: Context, api: TestClient) -> None:
    add(api)
    tick = stored(ctx).next_tick
    assert api.delete("/schedules/s").status_code == 204
    assert fire(ctx, tick + 5) == Counter()
    assert jobs(api) == []

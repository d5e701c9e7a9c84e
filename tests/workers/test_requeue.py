"""Pending jobs of a lost node move to live nodes (scripts/upkeep.py REQUEUE_LOST, run by the
sweep)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    CtxFactory,
    SettingsFactory,
    last_heard,
    register,
    report,
    submit,
)
from tests.fakes import FakeRegistry
from workers import tasks
from workers.context import Context


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=30, node_lost_secs=60, max_jobs_per_node=5)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def pending_ids(api: TestClient, node: str) -> list[str]:
    return [
        job["job_id"]
        for job in api.get("/jobs", params={"node_id": node}).json()
        if job["status"] == "pending"
    ]


def test_pending_jobs_of_a_lost_node_move_to_live_nodes_in_order(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "a", "b", "c")
    jobs = [submit(api, command=f"echo {i}") for i in range(9)]
    on_a = [job["job_id"] for job in jobs if job["node_id"] == "a"]
    assert len(on_a) == 3
    now = time.time()
    last_heard(rclient, settings, "a", now - 61)

    moved = store.run(ops.upkeep.requeue_lost(now))

    assert sorted(m.job_id for m in moved) == sorted(on_a)
    assert {m.from_node for m in moved} == {"a"} and {m.to_node for m in moved} <= {"b", "c"}
    assert pending_ids(api, "a") == []
    for node in ("b", "c"):
        queue = pending_ids(api, node)
        assert queue == sorted(queue, key=lambda job_id: int(job_id[4:]))  # oldest first
        assert all(api.get(f"/jobs/{j}").json()["node_id"] == node for j in queue)
    polled = api.get("/jobs", params={"node_id": "b", "status": "pending"}).json()
    assert [job["job_id"] for job in polled] == pending_ids(api, "b")
    assert store.run(ops.upkeep.requeue_lost(now)) == []  # nothing left to move


def test_recently_silent_running_and_lonely_jobs_stay(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "a", "b")
    first, second = submit(api, command="one"), submit(api, command="two")
    assert (first["node_id"], second["node_id"]) == ("a", "b")
    assert report(api, first["job_id"], "running").status_code == 200
    third = submit(api, command="three")  # pending on a
    now = time.time()

    last_heard(rclient, settings, "a", now - 45)  # silent, but not yet lost
    assert store.run(ops.upkeep.requeue_lost(now)) == []

    last_heard(rclient, settings, "a", now - 61)
    last_heard(rclient, settings, "b", now - 61)  # no live node to move to
    assert store.run(ops.upkeep.requeue_lost(now)) == []

    last_heard(rclient, settings, "b", now)
    moved = store.run(ops.upkeep.requeue_lost(now))
    assert [m.job_id for m in moved] == [third["job_id"]]
    assert api.get(f"/jobs/{first['job_id']}").json()["node_id"] == "a"  # running: stays


# With an external registry, the sweep records which compute nodes it saw healthy.


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as fake:
        fake.nodes = {"a": "healthy", "b": "healthy", "c": "healthy"}
        yield fake


def registry_api(make_client: ClientFactory, registry: FakeRegistry) -> TestClient:
    return make_client(registry_url=registry.url, registry_cache_secs=0, max_jobs_per_node=5)


def readable_for(ctx: Context, secs: float) -> None:
    """As if the sweep had read the registry without a failure for the last `secs`."""
    ctx.redis.set(ctx.keys.registry_readable_since, time.time() - secs)


def lost_node_ctx(make_ctx: CtxFactory, registry: FakeRegistry) -> Context:
    return make_ctx(registry_url=registry.url, node_ttl_secs=30, node_lost_secs=60)


def test_registry_nodes_gone_unhealthy_lose_their_pending_jobs(
    make_client: ClientFactory, make_ctx: CtxFactory, registry: FakeRegistry
) -> None:
    api = registry_api(make_client, registry)
    ctx = lost_node_ctx(make_ctx, registry)
    on_a = [job["job_id"] for job in (submit(api, command="x") for _ in range(6))][::3]
    assert {api.get(f"/jobs/{j}").json()["node_id"] for j in on_a} == {"a"}
    tasks.sweep(period=1)  # sees a, b and c healthy: nothing is lost
    assert pending_ids(api, "a") == on_a

    registry.nodes["a"] = "unhealthy"
    last_heard(ctx.redis, ctx.settings, "a", time.time() - 61)  # last seen healthy long ago
    readable_for(ctx, 61)
    tasks.sweep(period=2)

    assert pending_ids(api, "a") == []
    assert {api.get(f"/jobs/{j}").json()["node_id"] for j in on_a} <= {"b", "c"}
    assert ctx.redis.hget(ctx.keys.stats, "requeued") == b"2"


def test_instance_bound_jobs_stay_on_their_lost_node(
    make_client: ClientFactory, make_ctx: CtxFactory, registry: FakeRegistry
) -> None:
    registry.instances = {"i-1": "a"}
    api = registry_api(make_client, registry)
    ctx = lost_node_ctx(make_ctx, registry)
    bound = submit(api, command="serve", instance_id="i-1")["job_id"]
    free = [submit(api, command="x")["job_id"] for _ in range(3)]
    tasks.sweep(period=1)
    registry.nodes["a"] = "unhealthy"
    last_heard(ctx.redis, ctx.settings, "a", time.time() - 61)
    readable_for(ctx, 61)
    tasks.sweep(period=2)

    assert pending_ids(api, "a") == [bound]
    assert all(api.get(f"/jobs/{j}").json()["node_id"] != "a" for j in free)


def test_a_registry_outage_declares_no_node_lost(
    make_client: ClientFactory, make_ctx: CtxFactory, registry: FakeRegistry
) -> None:
    api = registry_api(make_client, registry)
    ctx = lost_node_ctx(make_ctx, registry)
    ids = [submit(api, command="x")["job_id"] for _ in range(3)]
    tasks.sweep(period=1)
    for node in ("a", "c"):  # seen healthy long ago; b just now, so there is a live target
        last_heard(ctx.redis, ctx.settings, node, time.time() - 61)
    readable_for(ctx, 61)
    registry.stop()  # and now nobody can tell whether a and c are alive
    tasks.sweep(period=2)
    assert [api.get(f"/jobs/{j}").json()["node_id"] for j in ids] == ["a", "b", "c"]

    # Back, with c not yet re-registered: the outage does not count towards its loss...
    registry.start()
    registry.nodes["c"] = "unhealthy"
    tasks.sweep(period=3)
    assert [api.get(f"/jobs/{j}").json()["node_id"] for j in ids] == ["a", "b", "c"]
    # ...only NODE_LOST_SECS of unbroken reads without c do.
    readable_for(ctx, 61)
    last_heard(ctx.redis, ctx.settings, "c", time.time() - 61)
    tasks.sweep(period=4)
    assert api.get(f"/jobs/{ids[2]}").json()["node_id"] in ("a", "b")


def test_a_registry_error_page_is_an_outage_not_an_empty_node_list(
    make_client: ClientFactory, make_ctx: CtxFactory, registry: FakeRegistry
) -> None:
    api = registry_api(make_client, registry)
    ctx = lost_node_ctx(make_ctx, registry)
    job_id = submit(api, command="x")["job_id"]  # on a
    tasks.sweep(period=1)
    readable_for(ctx, 61)
    last_heard(ctx.redis, ctx.settings, "a", time.time() - 61)
    registry.failing = 503  # answers {} with an error status
    tasks.sweep(period=2)
    assert api.get(f"/jobs/{job_id}").json()["node_id"] == "a"
    assert not ctx.redis.exists(ctx.keys.registry_readable_since)


def test_node_lost_secs_below_the_ttl_is_a_config_error(make_settings: SettingsFactory) -> None:
    from scheduler.config import ConfigError

    with pytest.raises(ConfigError, match="NODE_LOST_SECS"):
        make_settings(node_ttl_secs=30, node_lost_secs=10)


def test_node_lost_secs_defaults_to_four_ttls(make_settings: SettingsFactory) -> None:
    assert make_settings(node_ttl_secs=600).node_lost_after == 2400
    assert make_settings().node_lost_after == 120
    assert make_settings(node_ttl_secs=30, node_lost_secs=45).node_lost_after == 45


@pytest.mark.parametrize("stale", ["another node's job", "a running job", "no record"])
def test_a_stale_queue_entry_is_dropped_not_moved_for_ever(
    stale: str, api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    """An entry in a lost node's queue whose job is not pending there (left by a crash or a
    restore over older state) leaves the queue; it used to be moved again on every call, so
    the sweep's loop (a full batch: call again) never ended."""
    register(api, "a", "b")
    job_id = next(j["job_id"] for j in (submit(api, command="x") for _ in range(2)))
    keys = Keys(settings.redis_prefix)
    node = api.get(f"/jobs/{job_id}").json()["node_id"]
    other = "b" if node == "a" else "a"
    if stale == "a running job":
        assert report(api, job_id, "running").status_code == 200
        other = node
    elif stale == "no record":
        job_id = "job-999"
    rclient.zadd(keys.node_status(other, "pending"), {job_id: 1})
    now = time.time()
    last_heard(rclient, settings, "a" if other == "a" else "b", now - 61)
    last_heard(rclient, settings, "b" if other == "a" else "a", now)

    moved = store.run(ops.upkeep.requeue_lost(now, limit=1))

    assert job_id not in [m.job_id for m in moved]
    assert rclient.zscore(keys.node_status(other, "pending"), job_id) is None

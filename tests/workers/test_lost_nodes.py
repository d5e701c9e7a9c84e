"""The running jobs of a lost node (scripts/upkeep.py LOSE_RUNNING, run by the sweep) and a
node that deregisters (scripts/nodes.py DELETE_NODE): issue #11, item 3."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, cast

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
from workers import tasks


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=30, node_lost_secs=60, max_jobs_per_node=5)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def events(rclient: redis.Redis, settings: Settings) -> list[dict[str, Any]]:
    entries = cast(list[bytes], rclient.lrange(Keys(settings.redis_prefix).outbox, 0, -1))
    return [json.loads(entry.split(b" ", 1)[1]) for entry in entries]


def running_on(api: TestClient, node: str, **fields: Any) -> str:
    """A job claimed by `node` (the round-robin puts it there)."""
    while True:
        job = submit(api, **fields)
        if job["node_id"] == node:
            assert report(api, job["job_id"], "running").status_code == 200
            return str(job["job_id"])


def job(api: TestClient, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"/jobs/{job_id}").json()
    return found


def test_a_lost_nodes_run_job_is_retried_on_a_live_node(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "a", "b")
    job_id = running_on(api, "a", command="sleep 100")
    keys = Keys(settings.redis_prefix)
    now = time.time()
    last_heard(rclient, settings, "a", now - 45)  # silent, not yet lost
    assert store.run(ops.upkeep.lose_running(now)) == []

    last_heard(rclient, settings, "a", now - 61)
    (lost,) = store.run(ops.upkeep.lose_running(now))

    assert (lost.job_id, lost.from_node, lost.to_node, lost.status) == (job_id, "a", "b", "pending")
    after = job(api, job_id)
    assert (after["status"], after["node_id"], after["retry_count"]) == ("pending", "b", 1)
    assert after["stderr"] == "node lost" and "exit_code" not in after
    assert (
        rclient.scard(keys.node_busy("a")) == 0 and rclient.zscore(keys.deadlines, job_id) is None
    )
    polled = api.get("/jobs", params={"node_id": "b", "status": "pending"}).json()
    assert [j["job_id"] for j in polled] == [job_id]
    assert events(rclient, settings) == []  # a retry is not an ending: no event
    assert store.run(ops.upkeep.lose_running(now)) == []  # handled once
    assert report(api, job_id, "running", node_id="b").status_code == 200
    assert report(api, job_id, "done", exit_code=0, node_id="b").status_code == 200
    assert events(rclient, settings) == [{"job_id": job_id, "status": "done"}]


def test_a_lost_nodes_run_job_without_retries_fails_for_good(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis
) -> None:
    api = make_client(settings, max_job_retries=0)
    register(api, "a", "b")
    job_id = running_on(api, "a", command="sleep 100")
    now = time.time()
    last_heard(rclient, settings, "a", now - 61)

    no_retry = SyncJobStore.connect(dataclasses.replace(settings, max_job_retries=0))
    try:
        assert [g.status for g in no_retry.run(ops.upkeep.lose_running(now))] == ["failed"]
    finally:
        no_retry.close()
    after = job(api, job_id)
    assert (after["status"], after["node_id"], after["exit_code"]) == ("failed", "a", -1)
    assert after["stderr"] == "node lost" and "finished_at" in after
    assert events(rclient, settings) == [{"job_id": job_id, "status": "failed"}]
    assert report(api, job_id, "done", exit_code=0).status_code == 409  # final


def test_a_lost_nodes_service_is_placed_again(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "a", "b")
    job_id = running_on(api, "a", command="serve", job_type="service", port=8080)
    now = time.time()
    last_heard(rclient, settings, "a", now - 61)

    assert [(g.to_node, g.status) for g in store.run(ops.upkeep.lose_running(now))] == [
        ("b", "pending")
    ]
    after = job(api, job_id)
    assert (after["status"], after["node_id"], after["retry_count"]) == ("pending", "b", 0)
    assert events(rclient, settings) == []  # placed again, not ended


def test_with_no_live_node_a_lost_job_waits_on_its_node_then_moves(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "a")
    job_id = running_on(api, "a", command="sleep 100")
    now = time.time()
    last_heard(rclient, settings, "a", now - 61)
    assert [(g.to_node, g.status) for g in store.run(ops.upkeep.lose_running(now))] == [
        ("a", "pending")
    ]

    register(api, "b")
    assert [m.to_node for m in store.run(ops.upkeep.requeue_lost(time.time()))] == ["b"]
    assert job(api, job_id)["node_id"] == "b"


def test_the_sweep_handles_lost_running_jobs_and_counts_them(
    api: TestClient, make_ctx: CtxFactory, rclient: redis.Redis, settings: Settings
) -> None:
    ctx = make_ctx(node_ttl_secs=30, node_lost_secs=60, max_jobs_per_node=5)
    register(api, "a", "b")
    running = running_on(api, "a", command="sleep 100")
    last_heard(rclient, settings, "a", time.time() - 61)
    tasks.sweep(period=1)
    assert job(api, running)["node_id"] == "b"
    assert ctx.redis.hget(ctx.keys.stats, "lost") == b"1"


def test_a_node_that_deregisters_gets_no_job_and_its_queue_moves_at_once(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "a", "b")
    queued = [submit(api, command=f"echo {i}") for i in range(4)]
    on_a = [j["job_id"] for j in queued if j["node_id"] == "a"]
    bound_running = running_on(api, "a", command="sleep 100")
    assert len(on_a) == 2

    assert api.delete("/nodes/a").status_code == 204

    assert all(job(api, j)["node_id"] == "b" for j in on_a)
    assert {submit(api, command="next")["node_id"] for _ in range(4)} == {"b"}
    assert "a" not in api.get("/nodes").json()
    # Its running job (none after a clean stop) is the sweep's, as a lost node's.
    assert [(g.job_id, g.to_node) for g in store.run(ops.upkeep.lose_running(time.time()))] == [
        (bound_running, "b")
    ]
    assert api.delete("/nodes/a").status_code == 404
    # Once the sweep has handled it, nothing is bound to the deleted node: it leaves the index.
    assert store.run(ops.upkeep.requeue_lost(time.time())) == []
    assert rclient.zscore(Keys(settings.redis_prefix).nodes_compute, "a") is None


def test_the_sweep_forgets_deleted_nodes_an_older_version_left(
    api: TestClient, make_ctx: CtxFactory, rclient: redis.Redis, settings: Settings
) -> None:
    """Before issue 22 a deleted node stayed in nodes:compute with score 0 for good: the
    sweep removes such entries once no job is bound to them, and keeps registered nodes,
    however silent, and a deleted node that still has a job to hand on."""
    ctx = make_ctx(node_ttl_secs=30, node_lost_secs=60, max_jobs_per_node=5)
    keys = Keys(settings.redis_prefix)
    register(api, "a", "silent")
    last_heard(rclient, settings, "silent", time.time() - 600)
    rclient.zadd(keys.nodes_compute, {f"ghost-{i}": 0 for i in range(50)})
    job_id = running_on(api, "a", command="sleep 100")
    rclient.hdel(keys.nodes, "a")  # deleted with a running job, as a crash mid-stop leaves it
    rclient.zadd(keys.nodes_compute, {"a": 0})
    register(api, "b")

    tasks.sweep(period=1)

    assert rclient.zrange(keys.nodes_compute, 0, -1) == [b"silent", b"b"]
    assert job(api, job_id)["node_id"] == "b"
    assert ctx.redis.hget(ctx.keys.stats, "lost") == b"1"

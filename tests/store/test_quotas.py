"""Quotas per namespace (issue 41, item 3; docs/GUIDE.md, Quotas), at the scripts: a poll
hands out no job its namespace's quota refuses and moves it to wait (pending_reason quota),
the other namespaces' jobs behind it go on; a claim past the quota is refused; a job leaving
running wakes the namespace's oldest waiting job at the next placement pass; a cancel of a
waiting job ends it cleanly; a submit past the pending quota makes nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.access_key import ADMIN
from scheduler.models.quota import Quota
from scheduler.models.wire import rfc3339
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import quotas
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    SettingsFactory,
    assert_json,
    last_heard,
    register,
    report,
    submit,
)
from tests.places import expected, place_of


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=600, max_jobs_per_node=4)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.redis_prefix)


def set_quota(store: SyncJobStore, namespace: str, **limits: int) -> None:
    store.run(quotas.set_quota(namespace, Quota(**limits), time.time(), ADMIN))


def poll(api: TestClient, node: str, **params: Any) -> list[str]:
    query = {"node_id": node, "status": "pending", **params}
    return [job["job_id"] for job in assert_json(api.get("/jobs", params=query))]


def job(api: TestClient, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = assert_json(api.get(f"/jobs/{job_id}"))
    return found


def made(api: TestClient, namespace: str, **fields: Any) -> str:
    job_id: str = submit(api, command="true", namespace=namespace, **fields)["job_id"]
    return job_id


def waiting(rclient: redis.Redis, keys: Keys, namespace: str) -> list[str]:
    return [m.decode() for m in rclient.zrange(keys.over_quota(namespace), 0, -1)]


def one_runs_one_waits(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> tuple[str, str]:
    """Node a, team-a's quota of one running job: a1 running, a2 waiting for quota."""
    register(api, "a")
    set_quota(store, "team-a", running=1)
    a1, a2 = made(api, "team-a"), made(api, "team-a")
    assert poll(api, "a") == [a1]
    assert report(api, a1, "running").status_code == 200
    assert poll(api, "a") == []
    assert waiting(rclient, keys, "team-a") == [a2]
    return a1, a2


def test_a_namespace_at_its_quota_waits_and_the_others_jobs_behind_it_run(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    register(api, "a")
    set_quota(store, "team-a", running=1)
    a1, a2, a3 = (made(api, "team-a") for _ in range(3))
    b1 = made(api, "team-b")
    # Nothing of team-a runs yet: its first job is handed out, the next two passed over in
    # this poll (they would be over its quota beside it), team-b's behind them handed out.
    assert poll(api, "a") == [a1, b1]
    assert report(api, a1, "running").status_code == 200
    # team-a runs its quota's worth: its queued jobs leave the queue to wait for quota, in
    # order; team-b's is handed out as before.
    assert poll(api, "a") == [b1]
    assert waiting(rclient, keys, "team-a") == [a2, a3]
    record = job(api, a2)
    assert (record["status"], record["node_id"], record["pending_reason"]) == (
        "pending",
        "",
        "quota",
    )
    assert place_of(rclient, keys, a2) == expected(
        keys, "pending", "", namespace="team-a", over_quota=True
    )
    # The placement pass does not place them while they wait.
    assert store.run(ops.upkeep.place_unplaced(time.time())) == []
    # a1 ends: the next pass wakes the oldest waiting one (one slot freed) and places it.
    assert report(api, a1, "done", exit_code=0).status_code == 200
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [a2]
    assert waiting(rclient, keys, "team-a") == [a3]
    record = job(api, a2)
    assert (record["node_id"], record.get("pending_reason", "")) == ("a", "")
    assert place_of(rclient, keys, a2) == expected(keys, "pending", "a", namespace="team-a")
    assert poll(api, "a") == [a2, b1]


def test_a_claim_past_the_quota_is_refused_and_the_job_waits(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    """Two nodes' polls may each hand out a job of a namespace with room for one (a poll
    counts only running jobs): the second claim is refused, and its job waits for quota."""
    register(api, "a")
    set_quota(store, "team-a", running=1)
    a1 = made(api, "team-a", node_selector={"node.id": "a"})
    register(api, "b")
    a2 = made(api, "team-a", node_selector={"node.id": "b"})
    assert poll(api, "a") == [a1]
    assert poll(api, "b") == [a2]
    assert report(api, a1, "running").status_code == 200
    refused = report(api, a2, "running")
    assert (refused.status_code, refused.text) == (409, "job waits for its namespace's quota\n")
    assert job(api, a2)["pending_reason"] == "quota"
    assert waiting(rclient, keys, "team-a") == [a2]
    # a1 ends: a2 is woken and placed again (its selector names b), and runs.
    assert report(api, a1, "done", exit_code=0).status_code == 200
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [a2]
    assert poll(api, "b") == [a2]
    assert report(api, a2, "running").status_code == 200


def test_cpus_and_memory_in_use_count_against_the_quota(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    body = {"id": "a", "hostname": "a", "cpu_count": 8, "memory_mb": 1000, "role": "compute"}
    assert api.post("/nodes/register", json=body).status_code == 201
    set_quota(store, "team-a", cpus=2, memory_mb=100)
    big = made(api, "team-a", cpus=2)
    small = made(api, "team-a", memory_mb=50)
    other = made(api, "team-a", cpus=1)
    assert poll(api, "a") == [big, small]  # other: 3 cpus beside big, passed over
    assert report(api, big, "running").status_code == 200
    assert rclient.hgetall(keys.namespace_held("team-a")) == {b"cpus": b"2"}
    assert poll(api, "a") == [small]
    assert waiting(rclient, keys, "team-a") == [other]
    assert report(api, small, "running").status_code == 200
    assert rclient.hgetall(keys.namespace_held("team-a")) == {b"cpus": b"2", b"memory_mb": b"50"}
    assert report(api, big, "done", exit_code=0).status_code == 200
    assert rclient.hgetall(keys.namespace_held("team-a")) == {b"memory_mb": b"50"}
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [other]


def test_cancelling_a_waiting_job_ends_it_and_it_leaves_the_queue(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    a1, a2 = one_runs_one_waits(api, store, rclient, keys)
    cancelled = assert_json(api.delete(f"/jobs/{a2}"))
    assert (cancelled["status"], cancelled["failure_reason"]) == ("failed", "cancelled")
    assert "pending_reason" not in cancelled
    assert waiting(rclient, keys, "team-a") == []
    assert place_of(rclient, keys, a2) == expected(keys, "failed", "", namespace="team-a")
    # a1 ending wakes nobody: nothing waits.
    assert report(api, a1, "done", exit_code=0).status_code == 200
    assert store.run(ops.upkeep.place_unplaced(time.time())) == []


def test_a_quota_raised_or_removed_wakes_the_waiting_jobs(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    register(api, "a")
    set_quota(store, "team-a", running=1)
    a1, a2, a3 = (made(api, "team-a") for _ in range(3))
    assert poll(api, "a") == [a1]
    assert report(api, a1, "running").status_code == 200
    assert poll(api, "a") == []
    assert waiting(rclient, keys, "team-a") == [a2, a3]
    set_quota(store, "team-a", running=2)
    assert waiting(rclient, keys, "team-a") == [a3]
    set_quota(store, "team-a")  # no limit: no quota at all
    assert waiting(rclient, keys, "team-a") == []
    assert not rclient.exists(keys.quotas)
    assert sorted(store.run(ops.upkeep.place_unplaced(time.time()))) == sorted([a2, a3])
    assert poll(api, "a") == [a2, a3]


def test_a_namespace_at_quota_is_not_taken_from_by_an_idle_node(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    register(api, "a")
    set_quota(store, "team-a", running=1)
    a1, a2 = made(api, "team-a"), made(api, "team-a")
    b1 = made(api, "team-b")
    register(api, "b")
    # a's agent runs one at a time: a1 handed out, the rest noted for idle nodes.
    assert poll(api, "a", capacity="1", claims="named") == [a1]
    assert report(api, a1, "running", node_id="a").status_code == 200
    # b is idle: it takes team-b's job, not team-a's (over its quota).
    assert poll(api, "b") == [b1]
    assert job(api, a2)["node_id"] == "a"


def test_a_submit_past_the_pending_quota_makes_nothing(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    register(api, "a")
    set_quota(store, "team-a", pending=2, cpus=4)
    made(api, "team-a")
    made(api, "team-a", run_at=rfc3339(time.time() + 3600))  # delayed counts as pending
    before = rclient.zcard(keys.all_jobs)
    refused = api.post("/jobs", json={"command": "true", "namespace": "team-a"})
    assert refused.status_code == 429
    assert refused.text == (
        "over quota: namespace 'team-a' holds 2 pending jobs (pending, delayed or waiting) "
        "and its quota allows 2; nothing was made\n"
    )
    assert rclient.zcard(keys.all_jobs) == before
    # Another namespace, and the default, are not held by team-a's quota.
    made(api, "team-b")
    made(api, "")
    # A job asking more than the namespace may ever run is refused too.
    set_quota(store, "team-b", cpus=4)
    asking = api.post("/jobs", json={"command": "true", "namespace": "team-b", "cpus": 5})
    assert asking.status_code == 429
    assert "asks 5 cpus" in asking.text and "allows 4 cpus" in asking.text


def test_a_job_lost_with_its_node_frees_its_namespaces_room(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys, settings: Settings
) -> None:
    a1, a2 = one_runs_one_waits(api, store, rclient, keys)
    register(api, "b")
    now = time.time()
    last_heard(rclient, settings, "a", now - 10 * settings.node_ttl_secs - 3600)
    last_heard(rclient, settings, "b", now)
    assert [lost.job_id for lost in store.run(ops.upkeep.lose_running(now))] == [a1]
    # a1 left running (retried, or failed for good): a2 is woken and placed on b.
    assert a2 in store.run(ops.upkeep.place_unplaced(now))
    assert waiting(rclient, keys, "team-a") == []
    assert job(api, a2)["node_id"] == "b"

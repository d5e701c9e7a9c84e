"""Quotas' held-back jobs that must not wait forever (docs/GUIDE.md, Quotas): with an
external registry (REGISTRY_URL), or for an instance-bound job, a job a poll or a claim
holds back for its namespace's quota stays pending in its node's queue, passed over until
the namespace has room (placement could not put it back on a node); a job asking more than
a lowered quota allows at all waits for the quota to be raised (pending_reason
exceeds_quota) without holding up the namespace's jobs behind it."""

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
from tests.api.test_nodes_external import node
from tests.conftest import ClientFactory, SettingsFactory, report
from tests.fakes import FakeRegistry
from tests.places import expected, place_of
from tests.store.test_quotas import job, made, poll, set_quota, waiting


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=600, max_jobs_per_node=4)


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.redis_prefix)


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as fake:
        fake.nodes.update({"n1": "healthy"})
        fake.fields.update({"n1": node("h1")})
        fake.instances.update({"i-1": "n1"})
        yield fake


def assert_queued(api: TestClient, rclient: redis.Redis, keys: Keys, job_id: str) -> None:
    """Pending in n1's queue, as placement put it: not among the jobs waiting for quota."""
    record = job(api, job_id)
    assert (record["status"], record["node_id"], record.get("pending_reason", "")) == (
        "pending",
        "n1",
        "",
    )
    assert place_of(rclient, keys, job_id) == expected(keys, "pending", "n1", namespace="team-a")


@pytest.fixture
def external(make_client: ClientFactory, registry: FakeRegistry) -> TestClient:
    """The API of a deployment with an external registry (the fake's node n1)."""
    return make_client(registry_url=registry.url, node_ttl_secs=600, max_jobs_per_node=4)


def test_an_external_registrys_job_held_back_for_quota_stays_in_its_nodes_queue(
    external: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    api = external
    set_quota(store, "team-a", running=1)
    a1, a2 = made(api, "team-a"), made(api, "team-a")
    bound = made(api, "team-a", instance_id="i-1")
    b1 = made(api, "team-b")
    assert poll(api, "n1") == [a1, b1]
    assert report(api, a1, "running").status_code == 200
    # team-a runs its quota's worth: its other jobs are passed over, in n1's queue still.
    assert poll(api, "n1") == [b1]
    assert waiting(rclient, keys, "team-a") == []
    for held in (a2, bound):
        assert_queued(api, rclient, keys, held)
    # A claim past the quota is refused, and leaves the job where it was.
    refused = report(api, a2, "running")
    assert (refused.status_code, refused.text) == (409, "job waits for its namespace's quota\n")
    assert_queued(api, rclient, keys, a2)
    # a1 ends: the next polls hand them out, one at a time.
    assert report(api, a1, "done", exit_code=0).status_code == 200
    assert poll(api, "n1") == [a2, b1]
    assert report(api, a2, "running").status_code == 200
    assert report(api, a2, "done", exit_code=0).status_code == 200
    assert poll(api, "n1") == [bound, b1]
    assert report(api, bound, "running").status_code == 200


def test_a_poll_passes_over_at_most_its_scan_of_held_jobs(
    external: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    """Held jobs stay in the queue: a poll looks at no more than its scan (admit.lua
    QUOTA_SCAN) and ends, whatever the queue holds."""
    api = external
    set_quota(store, "team-a", running=1)
    first = made(api, "team-a")
    assert poll(api, "n1") == [first]
    assert report(api, first, "running").status_code == 200
    held = [made(api, "team-a") for _ in range(120)]
    made(api, "team-b")  # past the scan: a poll once team-a's head is handed out takes it
    assert poll(api, "n1") == []
    assert rclient.zcard(keys.node_status("n1", "pending")) == len(held) + 1
    assert report(api, first, "done", exit_code=0).status_code == 200
    assert poll(api, "n1") == [held[0]]


@pytest.fixture
def node_a(make_client: ClientFactory, settings: Settings) -> TestClient:
    """The API, with node a (16 cpus, 1000 MB) registered."""
    api = make_client(settings)
    body = {"id": "a", "hostname": "a", "cpu_count": 16, "memory_mb": 1000, "role": "compute"}
    assert api.post("/nodes/register", json=body).status_code == 201
    return api


def test_a_job_asking_more_than_a_lowered_quota_does_not_hold_up_the_others(
    node_a: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    api = node_a
    set_quota(store, "team-a", running=1, cpus=4)
    first = made(api, "team-a", cpus=1)
    big, small = made(api, "team-a", cpus=4), made(api, "team-a", cpus=1)
    late = made(api, "team-a", cpus=3)
    assert poll(api, "a") == [first]
    assert report(api, first, "running").status_code == 200
    assert poll(api, "a") == []
    assert waiting(rclient, keys, "team-a") == [big, small, late]
    # The quota is lowered below big's asks: big waits for it to be raised, saying so, in
    # the same queue.
    set_quota(store, "team-a", running=1, cpus=2)
    reasons = {job_id: job(api, job_id)["pending_reason"] for job_id in (big, small, late)}
    assert reasons == {big: "exceeds_quota", small: "quota", late: "quota"}
    assert place_of(rclient, keys, big) == expected(
        keys, "pending", "", namespace="team-a", over_quota=True
    )
    # first ends: small, behind big, is woken and placed; late too big for now (FIFO).
    assert report(api, first, "done", exit_code=0).status_code == 200
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [small]
    assert waiting(rclient, keys, "team-a") == [big, late]
    assert job(api, late)["pending_reason"] == "exceeds_quota"
    assert poll(api, "a") == [small]
    # The quota raised: big fits again, and is woken.
    set_quota(store, "team-a", running=2, cpus=4)
    assert waiting(rclient, keys, "team-a") == [late]
    assert job(api, late)["pending_reason"] == "quota"
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [big]
    # Both in a's queue, big first (older); small passed over beside it (4 + 1 cpus).
    assert poll(api, "a") == [big]


def test_a_job_held_back_past_a_lowered_quota_says_it_asks_too_much(
    node_a: TestClient, store: SyncJobStore, rclient: redis.Redis, keys: Keys
) -> None:
    api = node_a
    set_quota(store, "team-a", memory_mb=500)
    asking = made(api, "team-a", memory_mb=400)
    set_quota(store, "team-a", memory_mb=300)
    assert poll(api, "a") == []
    assert waiting(rclient, keys, "team-a") == [asking]
    assert job(api, asking)["pending_reason"] == "exceeds_quota"

"""Priorities (issue 23, item 5): a job's `priority` (default 0, -1000..1000) orders its node's
queue, higher first and in submission order within one, through every way a job enters a
queue (a submit, a retry, a delayed job made due, a lost node's jobs moved, a restore), in
the same one-script poll; a node's pending listing pages in that order."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.job import JobCreate, JobUpdate, new_job
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import listing
from scheduler.store.scripts.jobs import transition
from scheduler.store.scripts.listing import JobQuery
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    SettingsFactory,
    assert_json,
    last_heard,
    register,
    report,
    submit,
)

TTL = 30

# (priority of each job submitted in turn, the order a poll answers them: 1-based positions)
ORDERS = [
    ([0, 0, 0], [1, 2, 3]),
    ([1, 2, 3], [3, 2, 1]),
    ([0, 5, 0, 5, -3, 1000, -1000, 1], [6, 2, 4, 8, 1, 3, 5, 7]),
    ([-1, -2, -1, -2], [1, 3, 2, 4]),
    ([-1000, 1000, 0], [2, 3, 1]),
]


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=TTL, max_jobs_per_node=50, job_timeout_secs=60)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "a")
    return client


def poll(api: TestClient, node: str = "a") -> list[str]:
    jobs = assert_json(api.get("/jobs", params={"node_id": node, "status": "pending"}))
    return [j["job_id"] for j in jobs]


def queue(rclient: redis.Redis, settings: Settings, node: str = "a") -> dict[str, float]:
    entries: Any = rclient.zrange(
        Keys(settings.redis_prefix).node_status(node, "pending"), 0, -1, withscores=True
    )
    return {member.decode(): score for member, score in entries}


def submit_all(api: TestClient, priorities: list[int], **fields: Any) -> list[str]:
    return [submit(api, command=f"p{p}", priority=p, **fields)["job_id"] for p in priorities]


@BOTH_FRONTS
@pytest.mark.parametrize(("priorities", "order"), ORDERS)
def test_a_poll_answers_higher_priorities_first_fifo_within_one(
    api: TestClient, priorities: list[int], order: list[int]
) -> None:
    ids = submit_all(api, priorities)
    assert poll(api) == [ids[i - 1] for i in order]


@BOTH_FRONTS
def test_a_poll_takes_the_head_of_the_queue_when_capacity_is_short(
    make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    api = make_client(make_settings(max_jobs_per_node=2))
    register(api, "a")
    low, _, high, top = submit_all(api, [0, 0, 3, 9])
    assert poll(api) == [top, high]
    for job_id in (top, high):
        assert_json(report(api, job_id, "running"))
    assert poll(api) == []
    assert_json(report(api, top, "done", exit_code=0))
    assert poll(api) == [low]


def test_priority_0_is_the_original_fifo_and_is_never_on_the_wire(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    plain = submit(api, command="x")
    zero = submit(api, command="x", priority=0)
    assert "priority" not in plain and "priority" not in zero
    raised = submit(api, command="x", priority=-2)
    assert raised["priority"] == -2
    assert queue(rclient, settings) == {
        plain["job_id"]: 1,  # its number exactly, as before priorities
        zero["job_id"]: 2,
        raised["job_id"]: 3 + 2 * 2**42,
    }


@pytest.mark.parametrize("priority", [1001, -1001, 2**53])
def test_a_priority_out_of_range_is_400_naming_the_field(api: TestClient, priority: int) -> None:
    response = api.post("/jobs", json={"command": "x", "priority": priority})
    assert response.status_code == 400 and "priority" in response.headers["x-error-detail"]
    assert poll(api) == []


def test_the_largest_scores_are_exact(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis
) -> None:
    """Job numbers near 2^42 at both ends of the priority range keep their distinct places."""
    settings = store.settings
    rclient.set(Keys(settings.redis_prefix).job_seq, 2**42 - 10)
    ids = [create(store, "a", p) for p in (-1000, 1000, -1000, 1000)]
    got = store.run(listing.list_jobs(JobQuery("a", "pending", 0, 10), 1 << 20)).jobs
    assert [job_id(blob) for blob in got] == [ids[1], ids[3], ids[0], ids[2]]
    assert queue(rclient, settings)[ids[0]] == 2**42 - 9 + 1000 * 2**42


def test_a_retry_keeps_its_place(api: TestClient) -> None:
    """Pending again after a failed attempt, a job is back at its priority's place and, by
    its number, ahead of jobs of that priority submitted after it."""
    first, low, second = submit_all(api, [5, 0, 5], max_retries=2)
    assert_json(report(api, first, "running"))
    retried = assert_json(report(api, first, "failed", exit_code=1))
    assert (retried["status"], retried["priority"]) == ("pending", 5)
    assert poll(api) == [first, second, low]


def test_a_delayed_job_made_due_takes_its_priority_place(
    api: TestClient, store: SyncJobStore
) -> None:
    backoff, urgent = submit_all(api, [2, 7], max_retries=1, retry_backoff_secs=60)
    later = submit(api, command="later", priority=7, delay_secs=60)["job_id"]
    plain = submit(api, command="plain")["job_id"]
    assert_json(report(api, backoff, "running"))
    assert assert_json(report(api, backoff, "failed", exit_code=1))["status"] == "delayed"
    assert poll(api) == [urgent, plain]
    assert sorted(store.run(ops.upkeep.promote_due(time.time() + 200))) == sorted([backoff, later])
    assert poll(api) == [urgent, later, backoff, plain]


def test_a_lost_nodes_jobs_keep_their_places_on_a_live_node(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    lost = [create(store, "a", p) for p in (0, 3, -1, 3)]
    live = [create(store, "b", p) for p in (3, 0)]
    now = time.time()
    last_heard(rclient, settings, "a", now - 4 * TTL - 1)
    last_heard(rclient, settings, "b", now)
    assert sorted(m.job_id for m in store.run(ops.upkeep.requeue_lost(now))) == sorted(lost)
    order = store.run(listing.list_jobs(JobQuery("b", "pending", 0, 10), 1 << 20)).jobs
    assert [job_id(blob) for blob in order] == [
        lost[1],
        lost[3],
        live[0],
        lost[0],
        live[1],
        lost[2],
    ]
    assert queue(rclient, settings, "a") == {}


def test_a_restore_keeps_the_queue_order(
    api: TestClient, settings: Settings, rclient: redis.Redis
) -> None:
    from scheduler.snapshot.restore import restore_if_empty
    from scheduler.snapshot.writer import snapshot_once
    from tests.snapshot_helpers import lose_redis_data

    ids = submit_all(api, [0, 4, -4, 4, 0])
    before, scores = poll(api), queue(rclient, settings)
    assert before == [ids[1], ids[3], ids[0], ids[4], ids[2]]
    assert snapshot_once(settings) >= 5
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert poll(api) == before
    assert queue(rclient, settings) == scores


@pytest.mark.parametrize("newest", [False, True], ids=["queue order", "from the back"])
def test_a_nodes_pending_listing_pages_in_queue_order(
    api: TestClient, store: SyncJobStore, newest: bool
) -> None:
    """The listing of a node's pending jobs (the UI's node and status filters) is its queue,
    and paging by the last job shown (`after`, or `before` from the back) sees each once,
    even when that job has left the queue since."""
    ids = [create(store, "a", p) for p in (0, 2, -5, 2, 0, 1000, -1000, 1, 0, 2)]
    create(store, "b", 9)  # another node's: never listed
    expected = [ids[i] for i in (5, 1, 3, 9, 7, 0, 4, 8, 2, 6)]
    if newest:
        expected.reverse()
    seen: list[str] = []
    bound = 0
    while True:
        page = store.run(
            listing.list_jobs(JobQuery("a", "pending", bound, 3, newest=newest), 1 << 20)
        ).jobs
        if not page:
            break
        seen += [job_id(blob) for blob in page]
        bound = int(seen[-1].removeprefix("job-"))
        if len(seen) == 3:  # the job the next page starts after is claimed meanwhile
            store.run(_claim(seen[-1]))
    assert seen == expected


def create(store: SyncJobStore, node: str, priority: int) -> str:
    now = time.time()
    request = JobCreate(command=f"p{priority}", priority=priority)  # type: ignore[call-arg]
    job = new_job(request, rfc3339(now))
    created = store.run(ops.jobs.create(job, Placement.fixed(node), now))
    return job_id(created.job)


def job_id(blob: bytes) -> str:
    return str(json.loads(blob)["job_id"])


def _claim(job: str) -> Call[bytes]:
    claim, policy = JobUpdate(status="running"), RetryPolicy(1, 0, 0)
    return transition(job, claim, time.time(), policy, "key", node_ttl=30)


def test_a_bound_not_stored_pages_from_a_priority_0_jobs_place(
    api: TestClient, store: SyncJobStore
) -> None:
    ids = [create(store, "a", p) for p in (1, 0, -1, 0)]
    after = store.run(listing.list_jobs(JobQuery("a", "pending", 99, 10), 1 << 20)).jobs
    assert [job_id(blob) for blob in after] == [ids[2]]  # job-99: where a 0 numbered 99 goes
    before = store.run(
        listing.list_jobs(JobQuery("a", "pending", 99, 10, newest=True), 1 << 20)
    ).jobs
    assert [job_id(blob) for blob in before] == [ids[3], ids[1], ids[0]]

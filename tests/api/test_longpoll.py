"""Long-poll (api/longpoll.py, store/connection/notify.py): `GET
/jobs?node_id=X&status=pending&wait=S` answers once the node has work, `GET
/jobs/{id}?wait=S[&status_not=X]` once the job changes, each at most S seconds later;
without `wait` both answer at once, as the original did.

A test starts the change only once the API has subscribed to the channel it waits on (PUBSUB
NUMSUB), so the answer can only come from the wake-up, never from the first check."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)
from tests.processes import api_replicas, scheduler_env

LONG = 30  # seconds: a wait that would fail the test's own time-out if it ran out


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=1, max_job_retries=0)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "n1")
    return client


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as executor:
        yield executor


def subscribers(rclient: redis.Redis, channel: str) -> int:
    reply: Any = rclient.pubsub_numsub(channel)
    return int(reply[0][1])


def once_waiting(rclient: redis.Redis, channel: str, count: int = 1) -> None:
    """Until the API has subscribed `channel` (count requests' worth: one subscription)."""
    deadline = time.monotonic() + 10
    while subscribers(rclient, channel) < min(count, 1):
        assert time.monotonic() < deadline, f"nobody waits on {channel}"
        time.sleep(0.01)


def in_thread(pool: ThreadPoolExecutor, call: Callable[[], httpx.Response]) -> Future[Any]:
    return pool.submit(call)


def poll(api: TestClient, wait: float, node: str = "n1") -> httpx.Response:
    return api.get("/jobs", params={"node_id": node, "status": "pending", "wait": wait})


def test_a_poll_with_work_is_answered_at_once(api: TestClient) -> None:
    job = submit(api, command="x")
    began = time.monotonic()
    assert [j["job_id"] for j in assert_json(poll(api, LONG))] == [job["job_id"]]
    assert time.monotonic() - began < LONG / 2


def test_a_waiting_poll_is_answered_when_a_job_is_placed(
    api: TestClient, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    waiting = in_thread(pool, lambda: poll(api, LONG))
    once_waiting(rclient, Keys(settings.redis_prefix).node_channel("n1"))
    job = submit(api, command="x")
    assert [j["job_id"] for j in assert_json(waiting.result(timeout=LONG / 2))] == [job["job_id"]]


def test_a_waiting_poll_is_answered_when_the_node_has_room_again(
    api: TestClient, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    first, second = submit(api, command="a"), submit(api, command="b")
    assert report(api, first["job_id"], "running").status_code == 200
    waiting = in_thread(pool, lambda: poll(api, LONG))
    once_waiting(rclient, Keys(settings.redis_prefix).node_channel("n1"))
    assert report(api, first["job_id"], "done", exit_code=0).status_code == 200
    jobs = assert_json(waiting.result(timeout=LONG / 2))
    assert [j["job_id"] for j in jobs] == [second["job_id"]]


def test_a_poll_with_no_work_answers_empty_when_the_wait_runs_out(
    api: TestClient, settings: Settings, rclient: redis.Redis
) -> None:
    began = time.monotonic()
    assert assert_json(poll(api, 0.3)) == []
    assert time.monotonic() - began >= 0.3
    channel = Keys(settings.redis_prefix).node_channel("n1")
    assert subscribers(rclient, channel) == 0, "the subscription outlived its last waiter"


def test_other_nodes_work_does_not_answer_a_poll(
    api: TestClient, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    register(api, "n2")
    waiting = in_thread(pool, lambda: poll(api, 0.5, node="n2"))
    once_waiting(rclient, Keys(settings.redis_prefix).node_channel("n2"))
    assert submit(api, command="x")["node_id"] == "n1"  # the first ticket: the first node
    assert assert_json(waiting.result(timeout=LONG)) == []


def test_a_waiting_idle_poll_takes_what_another_nodes_poll_leaves_waiting(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    """Work stealing: a node entering the backlog wakes the idle nodes' long-polls."""
    api = make_client(settings)
    register(api, "n1")
    first, second = submit(api, command="a"), submit(api, command="b")
    register(api, "n2")
    waiting = in_thread(pool, lambda: poll(api, LONG, node="n2"))
    once_waiting(rclient, Keys(settings.redis_prefix).backlog_channel)
    named = {"node_id": "n1", "status": "pending", "claims": "named", "capacity": "1"}
    assert [j["job_id"] for j in assert_json(api.get("/jobs", params=named))] == [first["job_id"]]
    jobs = assert_json(waiting.result(timeout=LONG / 2))
    assert [(j["job_id"], j["node_id"]) for j in jobs] == [(second["job_id"], "n2")]


def test_a_job_wait_is_answered_when_its_status_changes(
    api: TestClient, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    job_id = submit(api, command="x")["job_id"]
    params = {"wait": LONG, "status_not": "pending"}
    waiting = in_thread(pool, lambda: api.get(f"/jobs/{job_id}", params=params))
    once_waiting(rclient, Keys(settings.redis_prefix).job_channel(job_id))
    assert report(api, job_id, "running").status_code == 200
    assert assert_json(waiting.result(timeout=LONG / 2))["status"] == "running"


def test_a_job_wait_without_status_not_is_answered_on_any_change(
    api: TestClient, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    job_id = submit(api, command="x")["job_id"]
    assert report(api, job_id, "running").status_code == 200
    waiting = in_thread(pool, lambda: api.get(f"/jobs/{job_id}", params={"wait": LONG}))
    once_waiting(rclient, Keys(settings.redis_prefix).job_channel(job_id))
    assert report(api, job_id, "done", exit_code=3).status_code == 200
    assert assert_json(waiting.result(timeout=LONG / 2))["exit_code"] == 3


def test_the_timeout_sweep_answers_a_job_wait(
    api: TestClient,
    settings: Settings,
    rclient: redis.Redis,
    pool: ThreadPoolExecutor,
    store: SyncJobStore,
) -> None:
    job_id = submit(api, command="x")["job_id"]
    assert report(api, job_id, "running").status_code == 200
    params = {"wait": LONG, "status_not": "running"}
    waiting = in_thread(pool, lambda: api.get(f"/jobs/{job_id}", params=params))
    once_waiting(rclient, Keys(settings.redis_prefix).job_channel(job_id))
    assert store.run(ops.upkeep.sweep_timeouts(time.time() + settings.job_timeout_secs + 1)) == [
        job_id
    ]
    assert assert_json(waiting.result(timeout=LONG / 2))["status"] == "failed"


@pytest.mark.parametrize("ending", ["cancel", "done"])
def test_the_workers_settling_answers_a_waiters_wait(
    api: TestClient,
    settings: Settings,
    rclient: redis.Redis,
    pool: ThreadPoolExecutor,
    store: SyncJobStore,
    ending: str,
) -> None:
    """A waiter past the first piece of its dependency's ending is ended (or released) by
    the workers' SETTLE_ENDINGS, not by a request: its wait is answered then too."""
    dep = submit(api, command="dep")["job_id"]
    body = {"command": "w", "after": [dep]}
    waiters = [assert_json(api.post("/jobs", json=body), 201)["job_id"] for _ in range(200)]
    if ending == "cancel":
        assert_json(api.delete(f"/jobs/{dep}"))
    else:
        assert report(api, dep, "running").status_code == 200
        assert report(api, dep, "done", exit_code=0).status_code == 200
    left = next(w for w in waiters if assert_json(api.get(f"/jobs/{w}"))["status"] == "waiting")
    params = {"wait": LONG, "status_not": "waiting"}
    waiting = in_thread(pool, lambda: api.get(f"/jobs/{left}", params=params))
    once_waiting(rclient, Keys(settings.redis_prefix).job_channel(left))
    assert store.run(ops.upkeep.settle_endings()).left == 0
    answer = assert_json(waiting.result(timeout=LONG / 2))
    assert answer["status"] == ("failed" if ending == "cancel" else "pending")


def test_a_job_that_already_differs_is_answered_at_once(api: TestClient) -> None:
    job_id = submit(api, command="x")["job_id"]
    began = time.monotonic()
    response = api.get(f"/jobs/{job_id}", params={"wait": LONG, "status_not": "running"})
    assert assert_json(response)["status"] == "pending"
    assert time.monotonic() - began < LONG / 2


def test_an_unknown_job_is_404_at_once(api: TestClient) -> None:
    assert_text_error(api.get("/jobs/job-999", params={"wait": LONG}), 404, "job not found")


@pytest.mark.parametrize("wait", ["-1", "abc", "61", "1e3", "", "0x10", "1.1234567", "nan"])
def test_a_bad_wait_is_400(api: TestClient, wait: str) -> None:
    job_id = submit(api, command="x")["job_id"]
    expected = "invalid wait: use 0 to 60 seconds"
    assert_text_error(poll(api, wait), 400, expected)  # type: ignore[arg-type]
    assert_text_error(api.get(f"/jobs/{job_id}", params={"wait": wait}), 400, expected)


def test_a_bad_status_not_and_a_wait_on_a_listing_are_400(api: TestClient) -> None:
    job_id = submit(api, command="x")["job_id"]
    response = api.get(f"/jobs/{job_id}", params={"wait": 1, "status_not": "nope"})
    statuses = "pending, delayed, waiting, running, done, failed, cancelling"
    assert_text_error(response, 400, f"invalid status_not: use one of {statuses}")
    expected = "wait is the agent's poll: node_id and status=pending, no paging"
    response = api.get("/jobs", params={"status": "pending", "wait": 1})
    assert_text_error(response, 400, expected)
    response = api.get(
        "/jobs", params={"node_id": "n1", "status": "pending", "wait": 1, "limit": 5}
    )
    assert_text_error(response, 400, expected)


def test_wait_zero_and_no_wait_answer_at_once(api: TestClient) -> None:
    assert assert_json(poll(api, 0)) == []
    assert assert_json(api.get("/jobs", params={"node_id": "n1", "status": "pending"})) == []


def test_waiting_requests_share_one_subscriber_connection_and_block_nothing(
    api: TestClient, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    before = len(rclient.client_list())
    waiting = [in_thread(pool, lambda: poll(api, LONG)) for _ in range(6)]
    once_waiting(rclient, Keys(settings.redis_prefix).node_channel("n1"))
    # Meanwhile the API answers everything else on its multiplexed connection.
    for _ in range(20):
        assert assert_json(api.get("/jobs", params={"node_id": "n2", "status": "pending"})) == []
    assert len(rclient.client_list()) <= before + 1
    job = submit(api, command="x")
    for future in waiting:
        jobs = assert_json(future.result(timeout=LONG / 2))
        assert [j["job_id"] for j in jobs] == [job["job_id"]]


def test_a_lost_subscriber_connection_answers_the_waiting_requests(
    api: TestClient, settings: Settings, rclient: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    waiting = in_thread(pool, lambda: poll(api, LONG))
    channel = Keys(settings.redis_prefix).node_channel("n1")
    once_waiting(rclient, channel)
    once_waiting(rclient, Keys(settings.redis_prefix).backlog_channel)  # its second channel
    rclient.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    assert assert_json(waiting.result(timeout=LONG / 2)) == []
    # The next long-poll subscribes on a new connection and is woken as usual.
    waiting = in_thread(pool, lambda: poll(api, LONG))
    once_waiting(rclient, channel)
    job = submit(api, command="x")
    assert [j["job_id"] for j in assert_json(waiting.result(timeout=LONG / 2))] == [job["job_id"]]


def test_a_client_that_leaves_ends_its_wait(redis_url: str, rclient: redis.Redis) -> None:
    env = scheduler_env(redis_url, "longpoll-gone")
    channel = Keys("longpoll-gone").node_channel("n1")
    with api_replicas(1, env) as urls:
        node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
        assert httpx.post(f"{urls[0]}/nodes/register", json=node).status_code == 201
        params = {"node_id": "n1", "status": "pending", "wait": LONG}
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(f"{urls[0]}/jobs", params=params, timeout=0.5)
        deadline = time.monotonic() + 10
        while subscribers(rclient, channel):
            assert time.monotonic() < deadline, "the wait outlived its client"
            time.sleep(0.05)

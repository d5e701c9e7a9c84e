"""Every way a job ends goes through one Lua helper (settle.lua `finish`): whoever ends
it, the job leaves every index of its old status, holds nothing on its node, is in the
finished index, and exactly one event is published, with its final status: done or failed,
the only two the original's clients end a wait on, with `failure_reason` saying why the
scheduler failed it. A retry (a failed
report with retries left, a lost node) is not an ending: no event (the original published
only `done` and `failed`, CONTRACT 2.10, and subscribers take every event for an ending)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models import job as job_model
from scheduler.models.job import STATUSES
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, last_heard, register, report, submit

TIMEOUT, GRACE, TTL, LOST = 60, 30, 30, 60


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(
        max_job_retries=1,
        job_timeout_secs=TIMEOUT,
        cancel_grace_secs=GRACE,
        node_ttl_secs=TTL,
        node_lost_secs=LOST,
    )


class Run:
    """One job on node "a" (node "b" stands by), with the ways to move it."""

    def __init__(
        self, api: TestClient, store: SyncJobStore, rclient: redis.Redis, **fields: Any
    ) -> None:
        self.api, self.store, self.rclient = api, store, rclient
        register(api, "a", "b")
        # "b" silent for a moment: the job goes to "a" whichever node is less loaded.
        last_heard(rclient, store.settings, "b", time.time() - TTL - 1)
        job = submit(api, command="sleep 100", **fields)
        assert job["node_id"] == "a"
        self.job_id = str(job["job_id"])
        register(api, "b")
        self.skipped = len(self.events())

    def report(self, status: str, **fields: Any) -> None:
        response = report(self.api, self.job_id, status, **fields)
        assert response.status_code == 200, response.text

    def cancel(self) -> None:
        assert self.api.delete(f"/jobs/{self.job_id}").status_code == 200

    def time_out(self) -> None:
        assert self.store.sweep_timeouts(time.time() + TIMEOUT + 1) == [self.job_id]

    def pass_grace(self) -> None:
        assert self.store.finish_cancels(time.time() + GRACE + 1) == [self.job_id]

    def lose_node(self) -> None:
        node = self.job()["node_id"]
        now = time.time()
        for other in {"a", "b"} - {node}:
            last_heard(self.rclient, self.store.settings, other, now)
        last_heard(self.rclient, self.store.settings, node, now - LOST - 1)
        assert [lost.job_id for lost in self.store.lose_running(now)] == [self.job_id]
        last_heard(self.rclient, self.store.settings, node, now)  # back, for what follows

    def job(self) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get(f"/jobs/{self.job_id}").json()
        return found

    def events(self) -> list[dict[str, Any]]:
        outbox = Keys(self.store.settings.redis_prefix).outbox
        entries = cast(list[bytes], self.rclient.lrange(outbox, 0, -1))
        return [json.loads(entry.split(b" ", 1)[1]) for entry in entries]

    def own_events(self) -> list[str]:
        return [e["status"] for e in self.events()[self.skipped :] if e["job_id"] == self.job_id]


Step = Callable[[Run], None]


def claim(run: Run) -> None:
    run.report("running", node_id=run.job()["node_id"])


def done(run: Run) -> None:
    run.report("done", exit_code=0)


def fail(run: Run) -> None:
    run.report("failed", exit_code=3)


def cancel(run: Run) -> None:
    run.cancel()


def confirm_cancel(run: Run) -> None:
    run.report("cancelled")


def time_out(run: Run) -> None:
    run.time_out()


def pass_grace(run: Run) -> None:
    run.pass_grace()


def lose_node(run: Run) -> None:
    run.lose_node()


# (the steps, the final status, the failure_reason)
ENDINGS: dict[str, tuple[list[Step], str, str]] = {
    "done": ([claim, done], "done", ""),
    "retried, then done": ([claim, fail, claim, done], "done", ""),
    "failed after its retry": ([claim, fail, claim, fail], "failed", ""),
    "timed out": ([claim, time_out], "failed", "timed_out"),
    "retried, then timed out": ([claim, fail, claim, time_out], "failed", "timed_out"),
    "cancelled while pending": ([cancel], "failed", "cancelled"),
    "cancelled while running, the agent confirms": (
        [claim, cancel, confirm_cancel],
        "failed",
        "cancelled",
    ),
    "cancelled while running, past the grace": ([claim, cancel, pass_grace], "failed", "cancelled"),
    "its node lost, retried, then done": ([claim, lose_node, claim, done], "done", ""),
    "its node lost twice": ([claim, lose_node, claim, lose_node], "failed", "node_lost"),
    "failed, then its node lost": ([claim, fail, claim, lose_node], "failed", "node_lost"),
    "retried, then cancelled": ([claim, fail, cancel], "failed", "cancelled"),
}

# What the original's clients take for an ending (CONTRACT 5: the Go CLI's and the lambda
# service's waits, SNS subscribers): anything else, they wait on forever.
ORIGINAL_FINAL = ("done", "failed")


# The original's statuses (CONTRACT 2.2).
ORIGINAL_STATUSES = ("pending", "running", "done", "failed")


def promote_when_due(run: Run) -> None:
    assert run.store.promote_due(time.time() + 3601) == [run.job_id]


def after_a_running_job(api: TestClient) -> dict[str, Any]:
    """Fields of a job that waits for another, running one (on either node)."""
    register(api, "a", "b")
    dep = submit(api, command="first")["job_id"]
    assert report(api, dep, "running").status_code == 200
    return {"after": [dep]}


def its_dependency_times_out(run: Run) -> None:
    assert run.store.sweep_timeouts(time.time() + TIMEOUT + 1)


# A job that waits for another ends when that one fails: the walk's job is submitted with
# the fields WALK_FIELDS makes.
ENDINGS["its dependency timed out"] = ([its_dependency_times_out], "failed", "dependency_failed")
WALK_FIELDS = {"its dependency timed out": after_a_running_job}


# Each status of ours before the end: what the job is submitted with and the steps that
# bring it there, and the step of the scheduler alone (no client, no agent: the original
# agent cannot be told) that takes it out, to a status the original's clients know.
Fields = Callable[[TestClient], dict[str, Any]]
LEFT_BY_THE_SCHEDULER: dict[str, tuple[Fields, list[Step], Step]] = {
    "cancelling": (lambda api: {}, [claim, cancel], pass_grace),
    "delayed": (lambda api: {"delay_secs": 3600}, [], promote_when_due),
    "waiting": (after_a_running_job, [], its_dependency_times_out),
}


def test_no_status_leaves_an_original_client_waiting_forever() -> None:
    """The original's clients end a wait on done or failed only: every final status is one
    of them, and a status of ours before the end is one the scheduler leaves by itself (a
    new status needs its row in LEFT_BY_THE_SCHEDULER, and the walk below)."""
    assert set(job_model.FINAL_STATUSES) <= set(ORIGINAL_FINAL)
    assert {status for status, _ in job_model.ENDINGS.values()} <= set(ORIGINAL_FINAL)
    ours = set(STATUSES) - set(ORIGINAL_STATUSES)
    assert ours == set(LEFT_BY_THE_SCHEDULER)


@pytest.mark.parametrize("status", list(LEFT_BY_THE_SCHEDULER))
def test_a_status_of_ours_is_left_without_any_client(
    status: str,
    make_client: ClientFactory,
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
) -> None:
    fields, reach, leave = LEFT_BY_THE_SCHEDULER[status]
    api = make_client(settings)
    run = Run(api, store, rclient, **fields(api))
    for step in reach:
        step(run)
    assert run.job()["status"] == status
    leave(run)
    assert run.job()["status"] in ORIGINAL_STATUSES


def test_every_ending_is_walked() -> None:
    """Each ending the scheduler has (models.ENDINGS) is one of the walks above."""
    walked = {(status, reason) for _, status, reason in ENDINGS.values()}
    assert set(job_model.ENDINGS.values()) == walked


@pytest.mark.parametrize("name", list(ENDINGS))
def test_a_job_ends_once_with_one_event(
    name: str,
    make_client: ClientFactory,
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
) -> None:
    steps, final, reason = ENDINGS[name]
    api = make_client(settings)
    run = Run(api, store, rclient, **WALK_FIELDS.get(name, lambda api: {})(api))
    for step in steps[:-1]:
        step(run)
        assert run.own_events() == [], f"an event before the end, after {step.__name__}"
    steps[-1](run)

    job = run.job()
    assert (job["status"], job.get("failure_reason", "")) == (final, reason)
    assert job["status"] in ORIGINAL_FINAL and run.own_events() == [job["status"]]
    assert "finished_at" in job
    assert_indexed_as_ended(rclient, settings, job)


def assert_indexed_as_ended(rclient: redis.Redis, settings: Settings, job: dict[str, Any]) -> None:
    keys, job_id, node = Keys(settings.redis_prefix), job["job_id"], job["node_id"]
    for status in STATUSES:
        ended = status == job["status"]
        assert (rclient.zscore(keys.status(status), job_id) is not None) is ended, status
        assert (rclient.zscore(keys.node_status(node, status), job_id) is not None) is ended
    assert rclient.zscore(keys.finished, job_id) is not None
    assert rclient.zscore(keys.deadlines, job_id) is None
    assert rclient.zscore(keys.cancelling, job_id) is None
    for other in ("a", "b"):
        assert not rclient.sismember(keys.node_busy(other), job_id)
    assert rclient.sismember(keys.dirty, job_id)


# The endings of a running job on a node whose one slot it holds, each after claim.
RUNNING_ENDINGS: dict[str, list[Step]] = {
    "done": [done],
    "failed, no retry left": [fail, claim, fail],
    "timed out": [time_out],
    "cancelled, the agent confirms": [cancel, confirm_cancel],
    "cancelled, past the grace": [cancel, pass_grace],
}


@pytest.mark.parametrize("name", list(RUNNING_ENDINGS))
def test_an_ended_job_frees_its_nodes_slot_and_wakes_its_long_poll(
    name: str,
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    rclient: redis.Redis,
) -> None:
    """With one slot per node, a poll waiting on the node (long-poll) is answered with the
    next job the moment the first ends, whichever way it ends while running (a cancelling
    job's poll never waits: it answers with the job to stop)."""
    settings = make_settings(
        max_jobs_per_node=1,
        max_job_retries=1,
        job_timeout_secs=TIMEOUT,
        cancel_grace_secs=GRACE,
        node_ttl_secs=TTL,
        node_lost_secs=LOST,
    )
    store = SyncJobStore.connect(settings)
    try:
        run = Run(make_client(settings), store, rclient)
        claim(run)
        nxt = submit(run.api, command="next")
        while nxt["node_id"] != "a":
            nxt = submit(run.api, command="next")
        poll = {"node_id": "a", "status": "pending", "wait": 30}
        channel = Keys(settings.redis_prefix).node_channel("a")
        steps = RUNNING_ENDINGS[name]
        for step in steps[:-1]:
            step(run)
        if run.job()["status"] == "cancelling":
            # The node's poll answers at once while it has a job to stop (X-Cancel-Jobs):
            # nothing waits; the next poll after the end gets the next job.
            steps[-1](run)
            answered = run.api.get("/jobs", params=poll).json()
        else:
            with ThreadPoolExecutor(max_workers=1) as pool:
                waiting = pool.submit(run.api.get, "/jobs", params=poll)
                until_subscribed(rclient, channel)
                steps[-1](run)
                answered = waiting.result(timeout=20).json()
        assert [j["job_id"] for j in answered] == [nxt["job_id"]]
    finally:
        store.close()


def until_subscribed(rclient: redis.Redis, channel: str) -> None:
    """Until the API waits on `channel`, so only the ending's wake-up can answer the poll."""
    deadline = time.monotonic() + 10
    while cast(Any, rclient.pubsub_numsub(channel))[0][1] < 1:
        assert time.monotonic() < deadline, f"nobody waits on {channel}"
        time.sleep(0.01)


@pytest.mark.parametrize("how", ["its node deregisters", "its node is lost"])
def test_a_pending_job_moved_off_its_node_has_no_event(
    how: str,
    make_client: ClientFactory,
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
) -> None:
    run = Run(make_client(settings), store, rclient)
    if how == "its node deregisters":
        assert run.api.delete("/nodes/a").status_code == 204
    else:
        now = time.time()
        last_heard(rclient, settings, "a", now - LOST - 1)
        last_heard(rclient, settings, "b", now)
        assert [m.job_id for m in store.requeue_lost(now)] == [run.job_id]
    assert (run.job()["status"], run.job()["node_id"]) == ("pending", "b")
    assert run.own_events() == []

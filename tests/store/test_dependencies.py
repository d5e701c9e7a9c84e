"""Dependencies (issue 23, item 7): a job submitted with `after: [ids]` waits, out of every
node's queue, until all of them are done; the last one done makes it pending; a dependency
that fails (cancelled, timed out, ... included) fails it with failure_reason
dependency_failed, and its own dependents in turn; it never runs. Against a real Redis, with
the bounded bookkeeping checked (a counter per waiting job, a set per dependency)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)
from tests.snapshot_helpers import lose_redis_data


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=10, max_job_retries=0)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "a")
    return client


def poll(api: TestClient) -> list[str]:
    jobs = assert_json(api.get("/jobs", params={"node_id": "a", "status": "pending"}))
    return [j["job_id"] for j in jobs]


def run(api: TestClient, job_id: str, status: str = "done", code: int = 0) -> None:
    assert_json(report(api, job_id, "running"))
    assert_json(report(api, job_id, status, exit_code=code))


def job(api: TestClient, job_id: str) -> dict[str, Any]:
    return dict(assert_json(api.get(f"/jobs/{job_id}")))


@BOTH_FRONTS
def test_a_job_waits_until_every_dependency_is_done(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    first, second = submit(api, command="a"), submit(api, command="b")
    body = {"command": "c", "after": [first["job_id"], second["job_id"]]}
    after = assert_json(api.post("/jobs", json=body), 201)
    assert (after["status"], after["after"]) == ("waiting", [first["job_id"], second["job_id"]])
    assert after["job_id"] not in poll(api)
    assert_text_error(report(api, after["job_id"], "running"), 409, "job is not due yet")
    keys = Keys(settings.redis_prefix)
    assert rclient.hget(keys.waiting, after["job_id"]) == b"2"
    run(api, first["job_id"])
    assert job(api, after["job_id"])["status"] == "waiting"
    assert rclient.hget(keys.waiting, after["job_id"]) == b"1"
    run(api, second["job_id"])
    assert job(api, after["job_id"])["status"] == "pending"
    assert after["job_id"] in poll(api)
    assert rclient.hget(keys.waiting, after["job_id"]) is None
    assert not rclient.exists(keys.dependents(first["job_id"]), keys.dependents(second["job_id"]))


@pytest.mark.parametrize("how", ["failed", "cancelled", "timed out"])
def test_a_failed_dependency_fails_its_dependents_down_the_chain(
    how: str, api: TestClient, store: SyncJobStore, settings: Settings
) -> None:
    root = submit(api, command="root")
    child = assert_json(api.post("/jobs", json={"command": "c", "after": [root["job_id"]]}), 201)
    grandchild_body = {"command": "g", "after": [child["job_id"]]}
    grandchild = assert_json(api.post("/jobs", json=grandchild_body), 201)
    if how == "failed":
        run(api, root["job_id"], "failed", 2)
    elif how == "cancelled":
        assert_json(api.delete(f"/jobs/{root['job_id']}"))
    else:
        assert_json(report(api, root["job_id"], "running"))
        assert store.run(ops.upkeep.sweep_timeouts(time.time() + settings.job_timeout_secs + 1))
    for waiter in (child, grandchild):
        ended = job(api, waiter["job_id"])
        assert (ended["status"], ended["failure_reason"]) == ("failed", "dependency_failed")
        assert "dependency job-" in ended["stderr"]
    assert poll(api) == []  # neither ever runs


def test_after_a_job_done_or_failed_already(api: TestClient) -> None:
    done = submit(api, command="d")
    run(api, done["job_id"])
    failed = submit(api, command="f")
    run(api, failed["job_id"], "failed", 1)
    ready = assert_json(api.post("/jobs", json={"command": "x", "after": [done["job_id"]]}), 201)
    assert ready["status"] == "pending"
    doomed_body = {"command": "y", "after": [done["job_id"], failed["job_id"]]}
    doomed = assert_json(api.post("/jobs", json=doomed_body), 201)
    assert (doomed["status"], doomed["failure_reason"]) == ("failed", "dependency_failed")


@pytest.mark.parametrize(
    "body, message",
    [
        ({"command": "x", "after": ["job-999"]}, "invalid after: job-999 is not a job"),
        ({"command": "x", "after": ["nope"]}, "invalid after: 'nope' is not a job id"),
        ({"command": "x", "after": ["job-1", "job-1"]}, "invalid after: a job is named twice"),
        ({"command": "x", "after": ["job-1"], "delay_secs": 5}, "use after or a delay"),
    ],
)
def test_bad_dependencies_are_400_and_create_nothing(
    api: TestClient, body: dict[str, Any], message: str
) -> None:
    submit(api, command="job-1 exists")
    response = api.post("/jobs", json=body)
    assert response.status_code == 400 and response.text.startswith(message), response.text
    assert len(assert_json(api.get("/jobs"))) == 1


def test_too_many_dependencies_are_400(api: TestClient) -> None:
    response = api.post(
        "/jobs", json={"command": "x", "after": [f"job-{n}" for n in range(1, 102)]}
    )
    assert response.status_code == 400 and "after" in response.headers["x-error-detail"]


def test_a_waiting_job_is_cancelled_at_once_and_never_released(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    root = submit(api, command="root")
    child = assert_json(api.post("/jobs", json={"command": "c", "after": [root["job_id"]]}), 201)
    cancelled = assert_json(api.delete(f"/jobs/{child['job_id']}"))
    assert (cancelled["status"], cancelled["failure_reason"]) == ("failed", "cancelled")
    assert rclient.hget(Keys(settings.redis_prefix).waiting, child["job_id"]) is None
    run(api, root["job_id"])
    assert job(api, child["job_id"])["status"] == "failed"  # not resurrected


def test_waiting_jobs_survive_a_snapshot_and_restore(
    api: TestClient, settings: Settings, rclient: redis.Redis
) -> None:
    root = submit(api, command="root")
    done = submit(api, command="done")
    run(api, done["job_id"])
    body = {"command": "c", "after": [root["job_id"], done["job_id"]]}
    child = assert_json(api.post("/jobs", json=body), 201)
    assert snapshot_once(settings) >= 1
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert job(api, child["job_id"])["status"] == "waiting"
    keys = Keys(settings.redis_prefix)
    assert rclient.hget(keys.waiting, child["job_id"]) == b"1"  # only root is not done
    run(api, root["job_id"])
    assert job(api, child["job_id"])["status"] == "pending"


def test_a_long_chain_fails_whole_without_recursion(
    api: TestClient, rclient: redis.Redis, settings: Settings, store: SyncJobStore
) -> None:
    """A chain fails whole, its waiters settled from a worklist, so a chain's length is not
    bounded by Lua's stack: the request's script settles the first links, the workers' task
    the rest (tests/store/test_settling.py)."""
    root = submit(api, command="root")["job_id"]
    previous = root
    for _ in range(300):
        body = {"command": "link", "after": [previous]}
        previous = assert_json(api.post("/jobs", json=body), 201)["job_id"]
    assert_json(api.delete(f"/jobs/{root}"))
    assert store.run(ops.upkeep.settle_endings()).left == 0
    assert job(api, previous)["failure_reason"] == "dependency_failed"
    keys = Keys(settings.redis_prefix)
    assert rclient.zcard(keys.status("waiting")) == 0 and rclient.hlen(keys.waiting) == 0
    assert rclient.llen(keys.outbox) == 301  # one event per job


def test_a_retry_by_hand_waits_again_for_what_it_runs_after(api: TestClient) -> None:
    first = submit(api, command="first")["job_id"]
    after = {"command": "then", "after": [first]}
    then = assert_json(api.post("/jobs", json=after), 201)["job_id"]
    run(api, first, "failed", 1)
    assert job(api, then)["failure_reason"] == "dependency_failed"
    # Alone, while its dependency is still failed: refused, nothing changes.
    refused = api.post(f"/jobs/{then}/retry")
    said = f"a job it runs after has failed ({first}): retry that one first"
    assert_text_error(refused, 409, said)
    # The bulk retry's answer names it too.
    answer = assert_json(api.post("/jobs/retry", json={"job_ids": [then]}))
    assert (answer["blocked"], answer["blocked_by"]) == ([then], {then: first})
    # Both, in any order: the dependency first, then the job waits for it again.
    answer = assert_json(api.post("/jobs/retry", json={"job_ids": [then, first]}))
    assert answer["retried"] == [first, then]
    assert (job(api, first)["status"], job(api, then)["status"]) == ("pending", "waiting")
    run(api, first)
    assert job(api, then)["status"] == "pending"


def test_a_job_waited_for_by_too_many_is_refused(
    api: TestClient, rclient: redis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its ending settles every waiter in one script: their number is bounded."""
    from scheduler.store.scripts import create as create_scripts

    monkeypatch.setattr(create_scripts, "MAX_WAITERS", 2)
    root = submit(api, command="root")["job_id"]
    for _ in range(2):
        assert_json(api.post("/jobs", json={"command": "w", "after": [root]}), 201)
    refused = api.post("/jobs", json={"command": "w", "after": [root]})
    assert_text_error(refused, 400, f"invalid after: 2 jobs already wait for {root}")
    assert rclient.scard(Keys(settings.redis_prefix).dependents(root)) == 2

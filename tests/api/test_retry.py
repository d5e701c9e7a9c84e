"""Retry by hand (issue 23, item 8): POST /jobs/{id}/retry starts a failed job over (whatever
failed it: its command, a timeout, a cancel), pending on a live node with its retry count and
outputs cleared, no event; POST /jobs/retry does it for a list (the dead set). Behind the key;
anything else is refused and changes nothing."""

from __future__ import annotations

import time
from typing import Any

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
    last_heard,
    register,
    report,
    submit,
)

KEY = {"Authorization": "Bearer k"}


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(api_key="k", max_jobs_per_node=10, node_ttl_secs=30)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    client.headers.update(KEY)
    register(client, "a")
    return client


def failed_job(api: TestClient, **fields: Any) -> dict[str, Any]:
    job = submit(api, command="exit 3", max_retries=0, **fields)
    assert_json(report(api, job["job_id"], "running"))
    ended = assert_json(report(api, job["job_id"], "failed", exit_code=3, stderr="boom"))
    assert ended["status"] == "failed"
    return dict(ended)


def outbox(rclient: redis.Redis, settings: Settings) -> int:
    return int(rclient.llen(Keys(settings.redis_prefix).outbox))


def test_a_failed_job_starts_over(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    job = failed_job(api)
    events = outbox(rclient, settings)
    again = assert_json(api.post(f"/jobs/{job['job_id']}/retry"))
    assert (again["status"], again["retry_count"], again["node_id"]) == ("pending", 0, "a")
    for cleared in ("exit_code", "stderr", "finished_at", "running_at", "failure_reason"):
        assert cleared not in again
    assert again["max_retries"] == 0 and again["created_at"] == job["created_at"]
    keys = Keys(settings.redis_prefix)
    assert rclient.zscore(keys.finished, job["job_id"]) is None  # retention leaves it be
    assert rclient.zscore(keys.status("failed"), job["job_id"]) is None
    assert outbox(rclient, settings) == events  # it has not ended: no event
    polled = assert_json(api.get("/jobs", params={"node_id": "a", "status": "pending"}))
    assert [j["job_id"] for j in polled] == [job["job_id"]]
    # It runs and ends as any job does, with its one event.
    assert_json(report(api, job["job_id"], "running"))
    assert assert_json(report(api, job["job_id"], "done", exit_code=0))["status"] == "done"
    assert outbox(rclient, settings) == events + 1


def test_a_cancelled_or_timed_out_job_starts_over(
    api: TestClient, store: SyncJobStore, settings: Settings
) -> None:
    cancelled = submit(api, command="x")
    assert_json(api.delete(f"/jobs/{cancelled['job_id']}"))
    slow = submit(api, command="slow")
    assert_json(report(api, slow["job_id"], "running"))
    assert store.run(ops.upkeep.sweep_timeouts(time.time() + settings.job_timeout_secs + 1)) == [
        slow["job_id"]
    ]
    for job in (cancelled, slow):
        assert assert_json(api.post(f"/jobs/{job['job_id']}/retry"))["status"] == "pending"


def test_only_a_failed_job_is_retried(api: TestClient) -> None:
    pending = submit(api, command="x")
    done = submit(api, command="y")
    assert_json(report(api, done["job_id"], "running"))
    assert_json(report(api, done["job_id"], "done", exit_code=0))
    for job in (pending, done):
        before = assert_json(api.get(f"/jobs/{job['job_id']}"))
        assert_text_error(api.post(f"/jobs/{job['job_id']}/retry"), 409, "job is not failed")
        assert assert_json(api.get(f"/jobs/{job['job_id']}")) == before
    assert_text_error(api.post("/jobs/job-999/retry"), 404, "job not found")
    assert api.post("/jobs/bad%20id/retry").status_code == 404


def test_a_retry_needs_the_key(api: TestClient) -> None:
    job = failed_job(api)
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
        refused = api.post(f"/jobs/{job['job_id']}/retry", headers=headers)
        assert_text_error(refused, 401, "unauthorized")
        bulk = api.post("/jobs/retry", json={"job_ids": [job["job_id"]]}, headers=headers)
        assert_text_error(bulk, 401, "unauthorized")
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "failed"


def test_a_job_whose_node_died_starts_over_on_a_live_one(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    job = failed_job(api)
    register(api, "b")
    now = time.time()
    last_heard(rclient, settings, "a", now - 60)
    last_heard(rclient, settings, "b", now)
    assert assert_json(api.post(f"/jobs/{job['job_id']}/retry"))["node_id"] == "b"
    # With no live node at all: 503, and nothing changed.
    other = failed_job(api)
    last_heard(rclient, settings, "b", now - 60)
    refused = api.post(f"/jobs/{other['job_id']}/retry")
    assert_text_error(refused, 503, "no healthy compute nodes")
    assert assert_json(api.get(f"/jobs/{other['job_id']}")) == other


def test_the_dead_set_is_retried_in_bulk(api: TestClient) -> None:
    dead = [failed_job(api)["job_id"] for _ in range(3)]
    alive = submit(api, command="x")["job_id"]
    listed = assert_json(api.get("/jobs", params={"status": "failed"}))
    assert [j["job_id"] for j in listed] == dead  # the dead set
    ids = [*dead, alive, "job-999", dead[0]]
    answer = assert_json(api.post("/jobs/retry", json={"job_ids": ids}))
    assert answer == {
        "retried": dead,
        "not_found": ["job-999"],
        "not_failed": [alive],
        "unplaced": [],
        "blocked": [],
    }
    assert assert_json(api.get("/jobs", params={"status": "failed"})) == []


@pytest.mark.parametrize(
    "body, message",
    [
        (b"{}", "invalid body"),
        (b'{"job_ids": []}', "invalid job_ids: give 1 to 1000 job ids"),
        (b'{"job_ids": ["job 1"]}', "invalid job_ids: 'job 1' is not a job id"),
        (b'{"job_ids": "job-1"}', "invalid body"),
        (b'{"job_ids": ["job-1"], "all": true}', "invalid body"),
        (b"[", "invalid body"),
    ],
)
def test_a_bad_bulk_body_is_400_and_changes_nothing(
    api: TestClient, body: bytes, message: str
) -> None:
    job = failed_job(api)
    response = api.post("/jobs/retry", content=body)
    assert response.status_code == 400 and response.text.startswith(message)
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "failed"


def test_a_bulk_of_more_than_1000_is_400(api: TestClient) -> None:
    ids = [f"job-{n}" for n in range(1, 1002)]
    refused = api.post("/jobs/retry", json={"job_ids": ids})
    assert_text_error(refused, 400, "invalid job_ids: give 1 to 1000 job ids")

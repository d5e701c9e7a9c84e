"""Cancelling a job (DELETE /jobs/{id}): pending at once; running through `cancelling`, which
the agent hears of and ends, or the sweep ends after CANCEL_GRACE_SECS; never retried; one
event; behind the key."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from starlette.testclient import TestClient

from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store.keys import Keys
from tests.conftest import (
    ClientFactory,
    CtxFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)
from tests.snapshot_helpers import lose_redis_data
from workers import tasks


def outbox(api: TestClient, rclient: Any, prefix: str) -> list[str]:
    entries = cast(list[bytes], rclient.lrange(Keys(prefix).outbox, 0, -1))
    return [str(e, "utf-8").split(" ", 1)[1] for e in entries]


def poll(api: TestClient, node: str = "n1") -> Any:
    return api.get(f"/jobs?node_id={node}&status=pending")


@pytest.fixture
def api(client: TestClient) -> TestClient:
    register(client, "n1")
    return client


def test_a_pending_job_is_cancelled_at_once(api: TestClient, rclient: Any, prefix: str) -> None:
    job = submit(api, command="never runs")
    cancelled = assert_json(api.delete(f"/jobs/{job['job_id']}"))
    assert cancelled["status"] == "failed" and "finished_at" in cancelled
    assert cancelled["failure_reason"] == "cancelled"
    assert assert_json(api.get(f"/jobs/{job['job_id']}")) == cancelled
    assert assert_json(poll(api)) == []  # it left its node's queue
    listed = assert_json(api.get("/jobs?status=failed"))
    assert [j["job_id"] for j in listed] == [job["job_id"]]
    assert outbox(api, rclient, prefix) == [f'{{"job_id":"{job["job_id"]}","status":"failed"}}']
    # Final: a second cancel, a claim, a report are all refused and change nothing.
    assert_text_error(api.delete(f"/jobs/{job['job_id']}"), 409, "job already finished")
    assert report(api, job["job_id"], "running").status_code == 409
    assert assert_json(api.get(f"/jobs/{job['job_id']}")) == cancelled


def test_a_running_job_is_cancelling_until_its_agent_reports(
    api: TestClient, rclient: Any, prefix: str
) -> None:
    job = submit(api, command="sleep 600")
    assert_json(report(api, job["job_id"], "running"))
    cancelling = assert_json(api.delete(f"/jobs/{job['job_id']}"))
    assert cancelling["status"] == "cancelling"
    assert assert_json(api.delete(f"/jobs/{job['job_id']}")) == cancelling  # idempotent
    # The agent hears of it on its next poll (a header) or heartbeat (a field)...
    assert poll(api).headers["x-cancel-jobs"] == job["job_id"]
    beat = assert_json(api.post("/nodes/heartbeat", json={"id": "n1"}))
    assert beat["cancel"] == [job["job_id"]]
    # ...while the job keeps its slot (MAX_JOBS_PER_NODE 1): nothing new is handed out.
    submit(api, command="next")
    assert assert_json(poll(api)) == []
    # A late result is refused (the original agent, which cannot be told), nothing changes.
    late = report(api, job["job_id"], "done", exit_code=0, stdout="finished anyway")
    assert_text_error(late, 409, "job is being cancelled")
    assert report(api, job["job_id"], "failed", exit_code=1).status_code == 409
    assert assert_json(api.get(f"/jobs/{job['job_id']}")) == cancelling
    # The agent killed it and says so: final, with its output, one event, the slot free.
    ended = assert_json(report(api, job["job_id"], "cancelled", exit_code=-1, stdout="partial"))
    assert (ended["status"], ended["failure_reason"]) == ("failed", "cancelled")
    assert ended["stdout"] == "partial"
    assert ended["retry_count"] == 0
    assert [j["command"] for j in assert_json(poll(api))] == ["next"]
    assert "x-cancel-jobs" not in poll(api).headers
    assert outbox(api, rclient, prefix) == [f'{{"job_id":"{job["job_id"]}","status":"failed"}}']


def test_cancelled_is_reported_only_for_a_cancelling_job(api: TestClient) -> None:
    job = submit(api, command="x")
    assert_text_error(report(api, job["job_id"], "cancelled"), 409, "job is not being cancelled")
    assert_json(report(api, job["job_id"], "running"))
    assert_text_error(report(api, job["job_id"], "cancelled"), 409, "job is not being cancelled")
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "running"


def test_cancel_needs_the_key_and_a_known_job(make_client: ClientFactory) -> None:
    api = make_client(api_key="k")
    key = {"Authorization": "Bearer k"}
    assert api.post("/nodes/register", json={"id": "n1"}).status_code == 201
    job = assert_json(api.post("/jobs", json={"command": "x"}, headers=key), 201)
    assert_text_error(api.delete(f"/jobs/{job['job_id']}"), 401, "unauthorized")
    assert assert_json(api.get(f"/jobs/{job['job_id']}", headers=key))["status"] == "pending"
    assert_text_error(api.delete("/jobs/job-404", headers=key), 404, "job not found")
    assert api.delete("/jobs/bad%20id", headers=key).status_code == 404
    cancelled = assert_json(api.delete(f"/jobs/{job['job_id']}", headers=key))
    assert (cancelled["status"], cancelled["failure_reason"]) == ("failed", "cancelled")


def test_the_sweep_cancels_what_no_agent_confirmed_after_the_grace(
    make_ctx: CtxFactory, make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    ctx = make_ctx(cancel_grace_secs=1, job_timeout_secs=1)
    api = make_client(ctx.settings)
    register(api, "n1")
    job = submit(api, command="sleep 600")
    assert_json(report(api, job["job_id"], "running"))
    assert_json(api.delete(f"/jobs/{job['job_id']}"))
    tasks.sweep(period=1)  # within the grace: still cancelling
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "cancelling"
    time.sleep(1.2)  # past the grace (and past JOB_TIMEOUT_SECS, which no longer applies)
    assert tasks.sweep(period=2) == 0  # no timeout
    ended = assert_json(api.get(f"/jobs/{job['job_id']}"))
    assert (ended["status"], ended["failure_reason"]) == ("failed", "cancelled")
    assert "CANCEL_GRACE_SECS" in ended["stderr"]
    assert outbox(api, rclient, prefix) == [f'{{"job_id":"{job["job_id"]}","status":"failed"}}']
    tasks.sweep(period=3)
    assert len(outbox(api, rclient, prefix)) == 1  # nothing twice
    submit(api, command="next")
    assert [j["command"] for j in assert_json(poll(api))] == ["next"]  # the slot is free


def test_a_cancelling_job_restored_from_the_snapshot_is_ended_by_the_sweep(
    make_ctx: CtxFactory, make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    ctx = make_ctx()
    api = make_client(ctx.settings)
    register(api, "n1")
    job = submit(api, command="sleep 600")
    assert_json(report(api, job["job_id"], "running"))
    assert_json(api.delete(f"/jobs/{job['job_id']}"))
    assert snapshot_once(ctx.settings) == 1
    lose_redis_data(rclient, prefix)
    assert restore_if_empty(ctx.settings)
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "cancelling"
    tasks.sweep(period=1)  # the grace counts from before the loss: it is over
    ended = assert_json(api.get(f"/jobs/{job['job_id']}"))
    assert (ended["status"], ended["failure_reason"]) == ("failed", "cancelled")

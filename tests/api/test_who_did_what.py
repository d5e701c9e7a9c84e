"""Who did what (issue 41): a job says which key submitted it, cancelled it and last retried
it by hand (models/job.py submitted_by, cancelled_by, retried_by), through both fronts; the
admin key is `admin`; without a key nothing is said (the original's records)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.test_roles import as_key, make_key
from tests.conftest import BOTH_FRONTS, ClientFactory

pytestmark = BOTH_FRONTS
KEY = secrets.token_urlsafe(32)
ADMIN = {"Authorization": f"Bearer {KEY}"}
NODE = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}


def named(api: TestClient, name: str, role: str) -> dict[str, str]:
    return as_key(make_key(api, name, role, ADMIN))


def fail(api: TestClient, job_id: str) -> None:
    for status in ("running", "failed"):
        body = {"status": status, "node_id": "n1", "exit_code": 1}
        assert api.patch(f"/jobs/{job_id}", json=body, headers=ADMIN).status_code == 200


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    client = make_client(api_key=KEY, max_job_retries=0)
    assert client.post("/nodes/register", json=NODE, headers=ADMIN).status_code == 201
    return client


def test_a_job_says_who_submitted_cancelled_and_retried_it(api: TestClient) -> None:
    ci, ops = named(api, "ci", "submitter"), named(api, "ops", "operator")
    job: dict[str, Any] = api.post("/jobs", json={"command": "x"}, headers=ci).json()
    assert job["submitted_by"] == "ci" and "cancelled_by" not in job
    cancelled = api.delete(f"/jobs/{job['job_id']}", headers=ops).json()
    assert (cancelled["status"], cancelled["cancelled_by"]) == ("failed", "ops")
    retried = api.post(f"/jobs/{job['job_id']}/retry", headers=ci).json()
    assert retried["retried_by"] == "ci" and "cancelled_by" not in retried  # its cancel is over
    assert retried["submitted_by"] == "ci"
    fail(api, job["job_id"])
    again = api.post("/jobs/retry", json={"job_ids": [job["job_id"]]}, headers=ADMIN)
    assert again.json()["retried"] == [job["job_id"]]
    assert api.get(f"/jobs/{job['job_id']}", headers=ADMIN).json()["retried_by"] == "admin"


def test_a_running_job_cancelled_says_who_while_cancelling_and_after(api: TestClient) -> None:
    job = api.post("/jobs", json={"command": "x"}, headers=ADMIN).json()
    body = {"status": "running", "node_id": "n1"}
    assert api.patch(f"/jobs/{job['job_id']}", json=body, headers=ADMIN).status_code == 200
    cancelling = api.delete(f"/jobs/{job['job_id']}", headers=named(api, "me", "submitter"))
    assert (cancelling.json()["status"], cancelling.json()["cancelled_by"]) == ("cancelling", "me")
    ended = {"status": "cancelled", "node_id": "n1", "exit_code": -1}
    done = api.patch(f"/jobs/{job['job_id']}", json=ended, headers=ADMIN).json()
    assert (done["submitted_by"], done["cancelled_by"]) == ("admin", "me")


def test_a_batch_says_who_submitted_each_job(api: TestClient) -> None:
    ci = named(api, "batcher", "submitter")
    made = api.post("/jobs/batch", json={"jobs": [{"command": "a"}, {"command": "b"}]}, headers=ci)
    for entry in made.json()["jobs"]:
        job = api.get(f"/jobs/{entry['job_id']}", headers=ADMIN).json()
        assert job["submitted_by"] == "batcher"


def test_a_body_cannot_claim_who_submitted_it(api: TestClient) -> None:
    forged = {"command": "x", "submitted_by": "someone-else"}
    refused = api.post("/jobs", json=forged, headers=named(api, "honest", "submitter"))
    assert refused.status_code == 400 and "submitted_by: unknown field" in refused.text


def test_without_a_key_no_job_says_who(make_client: ClientFactory) -> None:
    api = make_client()
    assert api.post("/nodes/register", json=NODE).status_code == 201
    job = api.post("/jobs", json={"command": "x"}).json()
    cancelled = api.delete(f"/jobs/{job['job_id']}").json()
    assert not {"submitted_by", "cancelled_by"} & (set(job) | set(cancelled))

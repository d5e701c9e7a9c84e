"""Issue 41, named keys: every call the route table puts behind a key, made with a named key of
each role (models/access_key.py). A role at or above the call's Method.role is let in; one
below gets 403 naming the role needed, and nothing changes (docs/SECURITY.md, Named keys).
The hot ones through the hot lane too (tests/conftest.py, front). The web UI's pages are
tested with the UI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.api import guesses, roles_table
from scheduler.api.routes import TABLE
from scheduler.api.routing import Access
from scheduler.models.access_key import ROLES, Principal, Role
from tests.conftest import ClientFactory, assert_json, assert_text_error

ADMIN_KEY = "roles-test-admin-key-0123456789abcdef"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def as_key(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def make_key(api: TestClient, name: str, role: str, admin: dict[str, str] = AS_ADMIN) -> str:
    """A named key made through `api` by `admin` (the admin key's header)."""
    made = assert_json(api.post("/keys", json={"name": name, "role": role}, headers=admin), 201)
    key: str = made["key"]
    return key


def role_keys(api: TestClient) -> dict[str, str]:
    """A named key of each role, `<role>-key`: {role: key}."""
    return {role: make_key(api, f"{role}-key", role) for role in ROLES}


def forbidden(role: str, needed: Role) -> str:
    """The door's 403 to the key `<role>-key` (guesses.forbidden's wording)."""
    return guesses.forbidden(Principal(f"{role}-key", Role(role)), needed)[1]


# Each of the table's key calls, made real: on the deployment `deployment` makes (job-1
# pending on n1, schedule s1, service `{service}`, key `victim`).
MADE: dict[tuple[str, str], tuple[str, Any]] = {
    ("GET", "/schedule"): ("/schedule", None),
    ("GET", "/jobs"): ("/jobs", None),
    ("POST", "/jobs"): ("/jobs", {"command": "x", "env_vars": {"A": "1"}}),
    ("POST", "/jobs/batch"): ("/jobs/batch", {"jobs": [{"command": "x"}]}),
    ("POST", "/jobs/retry"): ("/jobs/retry", {"job_ids": ["job-1"]}),
    ("POST", "/jobs/{job_id}/retry"): ("/jobs/job-1/retry", None),
    ("GET", "/jobs/{job_id}"): ("/jobs/job-1", None),
    ("DELETE", "/jobs/{job_id}"): ("/jobs/job-1", None),
    ("GET", "/jobs/{job_id}/attempts"): ("/jobs/job-1/attempts", None),
    ("GET", "/jobs/{job_id}/place"): ("/jobs/job-1/place", None),
    ("GET", "/jobs/{job_id}/logs"): ("/jobs/job-1/logs", None),
    ("GET", "/events"): ("/events", None),
    ("GET", "/schedules"): ("/schedules", None),
    ("POST", "/schedules"): (
        "/schedules",
        {"name": "s2", "every_secs": 60, "job": {"command": "x"}},
    ),
    ("GET", "/schedules/{name}"): ("/schedules/s1", None),
    ("DELETE", "/schedules/{name}"): ("/schedules/s1", None),
    ("POST", "/schedules/{name}/pause"): ("/schedules/s1/pause", None),
    ("POST", "/schedules/{name}/resume"): ("/schedules/s1/resume", None),
    ("GET", "/nodes"): ("/nodes", None),
    ("DELETE", "/nodes/{node_id}"): ("/nodes/n1", None),
    ("POST", "/nodes/{node_id}/drain"): ("/nodes/n1/drain", None),
    ("POST", "/nodes/{node_id}/undrain"): ("/nodes/n1/undrain", None),
    ("GET", "/services"): ("/services", None),
    ("GET", "/services/{service_id}"): ("/services/{service}", None),
    ("DELETE", "/services/{service_id}"): ("/services/{service}", None),
    ("GET", "/keys"): ("/keys", None),
    ("GET", "/audit"): ("/audit", None),
    ("POST", "/keys"): ("/keys", {"name": "made", "role": "reader"}),
    ("DELETE", "/keys/{name}"): ("/keys/victim", None),
    ("GET", "/namespaces"): ("/namespaces", None),
    ("PUT", "/namespaces/{namespace}/quota"): ("/namespaces/team-a/quota", {"running": 1}),
    ("PATCH", "/namespaces/{namespace}/quota"): ("/namespaces/team-a/quota", {"cpus": 1}),
    ("GET", "/metrics"): ("/metrics", None),
    ("GET", "/openapi.json"): ("/openapi.json", None),
}


def keys_calls() -> Iterator[tuple[str, str, Role, bool]]:
    """(method, template, its least role, whether the lane serves it) of every call a named
    key makes (roles_table.keys_calls: the key's, and the operator's agent routes)."""
    for name, path, found in roles_table.keys_calls(TABLE):
        # The lane takes the poll, not a listing: only KEY's hot calls are the key's.
        hot = found.hot is not None and found.access is Access.KEY
        yield name, path, found.role, hot


def test_every_call_of_a_key_is_made_here() -> None:
    """A route added to the table is tested by role the day it is added."""
    assert {(method, path) for method, path, _, _ in keys_calls()} == MADE.keys()


CASES = [
    pytest.param(front, method, template, needed, id=f"{front}: {method} {template}")
    for method, template, needed, hot in keys_calls()
    for front in (("asgi", "lane") if hot else ("asgi",))
]


@pytest.fixture
def deployment(make_client: ClientFactory) -> tuple[TestClient, dict[str, str], str]:
    """An API with the admin key: node n1, job-1 pending on it, schedule s1, a service, a
    named key of each role and one named `victim`: (client, {role: key}, service id)."""
    api = make_client(api_key=ADMIN_KEY)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(api.post("/nodes/register", json=node, headers=AS_ADMIN), 201)
    assert_json(api.post("/jobs", json={"command": "x"}, headers=AS_ADMIN), 201)
    schedule = {"name": "s1", "every_secs": 60, "job": {"command": "x"}}
    assert_json(api.post("/schedules", json=schedule, headers=AS_ADMIN), 201)
    service = {"node_id": "n1", "instance_id": "i1", "port": 8080, "pid": 1}
    made = assert_json(api.post("/services", json=service, headers=AS_ADMIN), 201)
    keys = role_keys(api)
    make_key(api, "victim", "reader")
    return api, keys, made["id"]


def state(api: TestClient) -> list[Any]:
    """What any call could change, as the admin reads it."""
    reads = ["/jobs", "/nodes", "/schedules", "/services", "/keys", "/jobs/job-1/attempts"]
    reads.append("/namespaces")
    return [assert_json(api.get(path, headers=AS_ADMIN)) for path in reads]


@pytest.mark.parametrize(("front", "method", "template", "needed"), CASES, indirect=["front"])
def test_a_named_key_is_let_in_by_its_role(
    deployment: tuple[TestClient, dict[str, str], str],
    method: str,
    template: str,
    needed: Role,
) -> None:
    """Lowest role first: each role below the call's gets 403 and changes nothing; the first
    one allowed (and each above it) is let in: whatever the handler answers, not the door's
    refusal (a call made already may meet a 404 or a 409 by then)."""
    api, keys, service = deployment
    path, body = MADE[(method, template)]
    path = path.replace("{service}", service)
    before = state(api)
    for role in ROLES:
        response = api.request(method, path, json=body, headers=as_key(keys[role]))
        if Role(role).allows(needed):
            assert response.status_code not in (401, 403, 429), (role, response.text)
        else:
            assert_text_error(response, 403, forbidden(role, needed))
            assert state(api) == before, role

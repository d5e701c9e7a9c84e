"""Bearer auth with TINYAWS_API_KEY set (CONTRACT 2.5, tightened as DESIGN says): only /health
and what an agent does without a key (poll, PATCH, register, heartbeat) stay open."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.conftest import BOTH_FRONTS, ClientFactory, assert_text_error, register, submit

KEY = "s3cret-key"
GOOD = {"Authorization": f"Bearer {KEY}"}

# (method, path, JSON body, status with the right key or none needed)
OPEN = [
    ("GET", "/health", None, 200),
    ("HEAD", "/health", None, 200),
    ("GET", "/jobs?node_id=n1&status=pending", None, 200),
    ("GET", "/jobs?status=pending&node_id=n1", None, 200),
    ("PATCH", "/jobs/job-1", {"status": "running"}, 200),
    ("PATCH", "/jobs/job-404", {"status": "running"}, 404),
    ("POST", "/nodes/register", {"id": "n2", "hostname": "n2", "role": "compute"}, 201),
    ("POST", "/nodes/heartbeat", {"id": "n1"}, 200),
    ("GET", "/instances?node_id=n1", None, 200),  # the agents' call before each poll
]
PROTECTED = [
    ("GET", "/jobs", None, 200),
    ("GET", "/jobs?node_id=n1", None, 200),
    ("GET", "/jobs?node_id=n1&status=running", None, 200),
    ("GET", "/jobs?status=pending", None, 200),
    ("GET", "/jobs?node_id=&status=pending", None, 200),
    ("HEAD", "/jobs", None, 200),
    ("GET", "/jobs/job-1", None, 200),
    ("GET", "/jobs/job-1/attempts", None, 200),
    ("GET", "/jobs/job-404/attempts", None, 404),
    ("POST", "/jobs", {"command": "x"}, 201),
    ("POST", "/jobs/batch", {"jobs": [{"command": "x"}]}, 200),
    ("GET", "/schedule", None, 200),
    ("GET", "/nodes", None, 200),
    ("GET", "/nodes?role=compute", None, 200),
    ("DELETE", "/nodes/n1", None, 204),
    ("DELETE", "/nodes/ghost", None, 404),
    ("GET", "/schedules", None, 200),
    ("POST", "/schedules", {"name": "s1", "every_secs": 60, "job": {"command": "x"}}, 201),
    ("GET", "/schedules/ghost", None, 404),
    ("DELETE", "/schedules/ghost", None, 404),
    ("POST", "/schedules/ghost/pause", None, 404),
    ("POST", "/schedules/ghost/resume", None, 404),
    ("GET", "/nope", None, 404),
]
BAD_HEADERS = [
    {},
    {"Authorization": ""},
    {"Authorization": KEY},
    {"Authorization": f"bearer {KEY}"},
    {"Authorization": f"BEARER {KEY}"},
    {"Authorization": f"Basic {KEY}"},
    {"Authorization": f"Bearer  {KEY}"},
    {"Authorization": f"Bearer {KEY}x"},
    {"Authorization": f"Bearer {KEY[:-1]}"},
    {"Authorization": "Bearer wrong"},
    {"Authorization": "Bearer"},
    {"X-Api-Key": KEY},
]
# Whitespace around a header value is not part of it on the wire (RFC 9110 5.5): HTTP clients
# refuse to send these and servers strip it. Only an in-process ASGI call can hand them over.
ASGI_ONLY_HEADERS = [
    {"Authorization": f"Bearer {KEY} "},
    {"Authorization": f" Bearer {KEY}"},
    {"Authorization": "Bearer "},
]


@pytest.fixture
def secured(make_client: ClientFactory) -> TestClient:
    api = make_client(api_key=KEY)
    register(api, "n1")
    assert api.post("/jobs", json={"command": "x"}, headers=GOOD).status_code == 201
    return api


def call(api: TestClient, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    return api.request(method, path, json=body, headers=headers)


def route_id(case: tuple[str, str, Any, int]) -> str:
    return f"{case[0]} {case[1]}"


@BOTH_FRONTS  # through ASGI and through the hot lane (tests/conftest.py, front)
@pytest.mark.parametrize("case", OPEN, ids=route_id)
def test_open_routes_need_no_key(secured: TestClient, case: tuple[str, str, Any, int]) -> None:
    method, path, body, status = case
    assert call(secured, method, path, body, {}).status_code == status
    # A wrong key on an open route is not held against the agent.
    assert call(secured, method, path, body, {"Authorization": "Bearer wrong"}).status_code in (
        status,
        409,  # a repeated PATCH running meets the state machine, not the auth
    )


@BOTH_FRONTS  # through ASGI and through the hot lane (tests/conftest.py, front)
@pytest.mark.parametrize("case", PROTECTED, ids=route_id)
def test_protected_routes_need_the_key(
    secured: TestClient, case: tuple[str, str, Any, int]
) -> None:
    method, path, body, status = case
    before = secured.get("/jobs", headers=GOOD).content
    response = call(secured, method, path, body, {})
    if method == "HEAD":
        assert response.status_code == 401
    else:
        assert_text_error(response, 401, "unauthorized")
    assert secured.get("/jobs", headers=GOOD).content == before
    assert secured.get("/nodes", headers=GOOD).json().keys() == {"n1"}
    assert call(secured, method, path, body, GOOD).status_code == status


@BOTH_FRONTS  # through ASGI and through the hot lane (tests/conftest.py, front)
@pytest.mark.parametrize("headers", BAD_HEADERS, ids=lambda h: repr(h))
def test_only_the_exact_bearer_header_is_accepted(
    secured: TestClient, headers: dict[str, str]
) -> None:
    refused_and_nothing_changed(secured, headers)


@pytest.mark.parametrize("headers", ASGI_ONLY_HEADERS, ids=lambda h: repr(h))
def test_a_bearer_with_whitespace_around_it_is_refused(
    secured: TestClient, headers: dict[str, str]
) -> None:
    refused_and_nothing_changed(secured, headers)


def refused_and_nothing_changed(secured: TestClient, headers: dict[str, str]) -> None:
    assert_text_error(secured.get("/jobs", headers=headers), 401, "unauthorized")
    assert_text_error(
        secured.post("/jobs", json={"command": "y"}, headers=headers), 401, "unauthorized"
    )
    assert [job["job_id"] for job in secured.get("/jobs", headers=GOOD).json()] == ["job-1"]


@pytest.mark.parametrize(
    "query",
    [
        "node_id=&node_id=n1&status=pending",
        "node_id=n1&status=&status=pending",
        "status=pending&node_id=&node_id=n1",
        "status=&node_id=n1&status=pending",
    ],
)
@BOTH_FRONTS  # through ASGI and through the hot lane (tests/conftest.py, front)
def test_repeated_parameters_do_not_widen_the_open_poll(secured: TestClient, query: str) -> None:
    """Read by their first values these are listings (all pending jobs, or all of n1's jobs),
    which expose env_vars and output, not polls; read by their last, polls. Neither: a
    repeated parameter is refused at the door (params.py)."""
    name = "node_id" if "node_id=&" in query else "status"
    assert_text_error(
        secured.get(f"/jobs?{query}"), 400, f'parameter "{name}" given more than once'
    )


@BOTH_FRONTS  # through ASGI and through the hot lane (tests/conftest.py, front)
def test_without_a_key_everything_is_open(client: TestClient) -> None:
    register(client, "n1")
    job = submit(client, command="x")
    assert client.get(f"/jobs/{job['job_id']}").status_code == 200
    assert client.get("/jobs").status_code == 200
    assert client.get("/schedule").status_code == 200
    assert client.get("/nodes").status_code == 200
    assert client.delete("/nodes/n1").status_code == 204

"""Issue 41, namespaces read (models/namespace.py scope): GET /jobs per namespace (exact, one
round trip: the namespace indexes, merged by number for a key limited to several), the UI's
search and counts, the events, the metrics, the CLI's and the client's listings; and the
attack: a key of one namespace listing another's (it reads nothing, as of a namespace
without jobs). Through Starlette and the hot lane where it takes the call."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.test_namespaces import ADMIN, ADMIN_KEY, make_key, submit
from tests.api.test_roles import as_key
from tests.conftest import BOTH_FRONTS, ClientFactory, assert_json, assert_text_error

NAMESPACES = ("default", "team-a", "team-b")


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    """An API with the admin key and node n1, holding 30 jobs over the three NAMESPACES in
    turn (job-1 default's, job-2 team-a's, ...), every third of each namespace's cancelled
    and job-3 done: pending, cancelled and done jobs in each."""
    client = make_client(api_key=ADMIN_KEY, max_jobs_per_node=100)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(client.post("/nodes/register", json=node, headers=ADMIN), 201)
    for i in range(30):
        made = submit(client, ADMIN, namespace=NAMESPACES[i % 3])
        if i % 9 in (3, 4, 5):
            assert_json(client.delete(f"/jobs/{made['job_id']}", headers=ADMIN))
    for status in ("running", "done"):
        body: dict[str, Any] = {"status": status}
        if status == "done":
            body["exit_code"] = 0
        assert_json(client.patch("/jobs/job-3", json=body, headers=ADMIN))
    return client


def everything(api: TestClient) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = assert_json(api.get("/jobs", headers=ADMIN))
    assert len(jobs) == 30
    return jobs


def namespace_of(job: dict[str, Any]) -> str:
    return str(job.get("namespace", "default"))


def paged(
    api: TestClient, headers: dict[str, str], limit: int, newest: bool, **query: str
) -> list[str]:
    """Every page of a listing, `limit` jobs a page, followed to its end (an empty page)."""
    found: list[str] = []
    while True:
        params = {**query, "limit": str(limit)}
        if newest:
            params["order"] = "newest"
        if found:
            params["before" if newest else "after"] = found[-1]
        page = assert_json(api.get("/jobs", params=params, headers=headers))
        assert len(page) <= limit
        if not page:
            return found
        found += [job["job_id"] for job in page]


def expected(
    jobs: list[dict[str, Any]], namespaces: tuple[str, ...], status: str, newest: bool
) -> list[str]:
    kept = [
        job["job_id"]
        for job in jobs
        if namespace_of(job) in namespaces and (not status or job["status"] == status)
    ]
    return kept[::-1] if newest else kept


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_a_namespaces_listing_is_exact_across_statuses_orders_and_pages(
    api: TestClient, namespace: str
) -> None:
    jobs = everything(api)
    for status, newest, limit in itertools.product(
        ("", "pending", "failed", "done"), (False, True), (1, 4, 1000)
    ):
        query = {"namespace": namespace, **({"status": status} if status else {})}
        got = paged(api, ADMIN, limit, newest, **query)
        assert got == expected(jobs, (namespace,), status, newest), (status, newest, limit)
    assert {
        namespace_of(job)
        for job in assert_json(api.get("/jobs", params={"namespace": namespace}, headers=ADMIN))
    } == {namespace}


@BOTH_FRONTS
def test_a_key_of_two_namespaces_lists_both_merged_by_number_exactly(api: TestClient) -> None:
    jobs = everything(api)
    key = as_key(make_key(api, "ab", "reader", ["team-a", "default"]))
    both = ("team-a", "default")
    for status, newest, limit in itertools.product(
        ("", "pending", "failed"), (False, True), (1, 3, 7, 1000)
    ):
        query = {"status": status} if status else {}
        got = paged(api, key, limit, newest, **query)
        assert got == expected(jobs, both, status, newest), (status, newest, limit)
    # Each of its own alone, as the admin's listing of it.
    for namespace in both:
        assert paged(api, key, 4, False, namespace=namespace) == expected(
            jobs, (namespace,), "", False
        )


@BOTH_FRONTS
def test_a_key_of_one_namespace_listing_another_gets_nothing(api: TestClient) -> None:
    """The attack (issue 41): team-a's key asks for team-b's jobs, or the default's, or
    every job. It gets its own or nothing, as for a namespace with no jobs: it cannot tell
    team-b exists."""
    jobs = everything(api)
    key = as_key(make_key(api, "a", "reader", ["team-a"]))
    for namespace in ("team-b", "default", "team-z"):
        for query in ({}, {"status": "pending"}, {"order": "newest"}, {"after": "job-1"}):
            response = api.get("/jobs", params={"namespace": namespace, **query}, headers=key)
            assert response.content == b"[]\n"
    own = paged(api, key, 5, False)
    assert own == expected(jobs, ("team-a",), "", False) and own
    assert paged(api, key, 5, True, status="pending") == expected(
        jobs, ("team-a",), "pending", True
    )


@BOTH_FRONTS
def test_a_listing_by_namespace_takes_no_node(api: TestClient) -> None:
    """A node's index is not by namespace: a namespace's listing of a node could not page
    exactly, so it is refused, and so is a node's listing by a limited key (it would list
    other namespaces' jobs). A poll's query with a namespace is a listing, not a poll."""
    message = (
        "invalid node_id: a listing by namespace (namespace=, or any by a key limited to "
        "namespaces) takes no node_id"
    )
    for query in (
        {"node_id": "n1", "namespace": "team-a"},
        {"node_id": "n1", "status": "pending", "namespace": "team-a"},
    ):
        assert_text_error(api.get("/jobs", params=query, headers=ADMIN), 400, message)
    key = as_key(make_key(api, "a", "reader", ["team-a"]))
    for query in ({"node_id": "n1"}, {"node_id": "n1", "status": "running", "limit": "5"}):
        assert_text_error(api.get("/jobs", params=query, headers=key), 400, message)
    assert len(assert_json(api.get("/jobs", params={"node_id": "n1"}, headers=ADMIN))) == 30


@pytest.mark.parametrize("name", ["Team", "-a", "a_b", "x" * 64])
def test_a_namespace_that_is_not_a_name_is_refused(api: TestClient, name: str) -> None:
    response = api.get("/jobs", params={"namespace": name}, headers=ADMIN)
    assert response.status_code == 400 and "invalid namespace" in response.text

"""GET /jobs as a listing (CONTRACT 2.4, ordered and paginated as DESIGN says): job number
order, the node_id/status filters and their combinations, limit and after."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.job import JobCreate, new_job
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement
from scheduler.store import ops
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    SettingsFactory,
    assert_json,
    register,
    report,
    submit,
)


@pytest.fixture
def api(client: TestClient) -> TestClient:
    register(client, "n1")
    return client


def ids(response: Any) -> list[str]:
    return [job["job_id"] for job in assert_json(response)]


def test_list_is_an_empty_array_not_null(client: TestClient) -> None:
    assert_json(client.get("/jobs"))
    assert client.get("/jobs").content == b"[]\n"


def test_list_is_ordered_by_job_number(api: TestClient) -> None:
    for i in range(12):
        submit(api, command=f"c{i}")
    assert ids(api.get("/jobs")) == [f"job-{n}" for n in range(1, 13)]


@pytest.fixture
def spread(make_client: ClientFactory) -> TestClient:
    """Six jobs over n1/n2 (odd numbers on n1): 1 running, 2 failed, 3 done, 4-6 pending."""
    api = make_client(max_job_retries=0, max_jobs_per_node=5)
    register(api, "n1", "n2")
    for i in range(6):
        submit(api, command=f"c{i}")
    for job_id in ("job-1", "job-2", "job-3"):
        assert report(api, job_id, "running").status_code == 200
    assert report(api, "job-2", "failed", exit_code=1).status_code == 200
    assert report(api, "job-3", "done", exit_code=0).status_code == 200
    return api


@pytest.mark.parametrize(
    "query, expected",
    [
        ("", [1, 2, 3, 4, 5, 6]),
        ("?node_id=n1", [1, 3, 5]),
        ("?node_id=n2", [2, 4, 6]),
        ("?node_id=n3", []),
        ("?status=pending", [4, 5, 6]),
        ("?status=running", [1]),
        ("?status=done", [3]),
        ("?status=failed", [2]),
        ("?node_id=n1&status=running", [1]),
        ("?node_id=n1&status=done", [3]),
        ("?node_id=n2&status=failed", [2]),
        ("?node_id=n2&status=done", []),
        ("?node_id=&status=", [1, 2, 3, 4, 5, 6]),
        ("?limit=2", [1, 2]),
        ("?after=job-2&limit=2", [3, 4]),
        ("?after=job-6", []),
        ("?after=job-0", [1, 2, 3, 4, 5, 6]),
        ("?node_id=n1&after=job-1", [3, 5]),
        ("?status=pending&after=job-4&limit=1", [5]),
        ("?limit=10000", [1, 2, 3, 4, 5, 6]),
        ("?limit=0002", [1, 2]),
        ("?after=job-9007199254740992", []),
        ("?order=oldest&after=job-4", [5, 6]),
        ("?order=newest", [6, 5, 4, 3, 2, 1]),
        ("?order=newest&limit=2", [6, 5]),
        ("?order=newest&before=job-5&limit=2", [4, 3]),
        ("?order=newest&before=job-2", [1]),
        ("?order=newest&before=job-1", []),
        ("?order=newest&before=job-0", []),
        ("?order=newest&before=job-9007199254740992", [6, 5, 4, 3, 2, 1]),
        ("?order=newest&node_id=n1", [5, 3, 1]),
        ("?order=newest&status=pending&before=job-6", [5, 4]),
    ],
)
def test_list_filters_and_pages(spread: TestClient, query: str, expected: list[int]) -> None:
    assert ids(spread.get(f"/jobs{query}")) == [f"job-{n}" for n in expected]


@pytest.mark.parametrize(
    "query, message",
    [
        ("limit=0", "invalid limit"),
        ("limit=10001", "invalid limit"),
        ("limit=-1", "invalid limit"),
        ("limit=abc", "invalid limit"),
        ("limit=1.5", "invalid limit"),
        ("after=5", "invalid after"),
        ("after=job-", "invalid after"),
        ("after=job-x", "invalid after"),
        ("after=jobs-1", "invalid after"),
        ("after=job--1", "invalid after"),
        # Over-long numbers: more digits than int() converts was a 500 (issue #11, item 4).
        ("limit=" + "9" * 5000, "invalid limit"),
        ("limit=" + "0" * 5000 + "1", "invalid limit"),
        ("after=job-" + "1" * 4301, "invalid after"),
        ("after=job-9007199254740993", "invalid after"),
        ("order=latest", "invalid order"),
        ("order=NEWEST", "invalid order"),
        ("before=job-3", "invalid before"),
        ("order=oldest&before=job-3", "invalid before"),
        ("order=newest&after=job-3", "invalid after"),
        ("order=newest&before=3", "invalid before"),
        ("order=newest&before=job-x", "invalid before"),
        ("order=newest&before=job-9007199254740993", "invalid before"),
        ("order=newest&limit=0", "invalid limit"),
        # A status nothing has (a typo) is told, listing them (issue 38); so is a retired one.
        ("status=bogus", "invalid status: use one of pending, delayed, waiting, running, done"),
        ("status=cancelled", "invalid status: use one of pending"),
        ("node_id=n1&status=Pending", "invalid status: use one of pending"),
    ],
)
def test_list_rejects_bad_paging(api: TestClient, query: str, message: str) -> None:
    response = api.get(f"/jobs?{query}")
    assert response.status_code == 400
    assert response.text.startswith(message) and response.text.endswith("\n")
    assert response.headers["content-type"] == "text/plain; charset=utf-8"


def _seed(settings: Settings, node_id: str, count: int) -> None:
    """Many jobs through the create script itself, without the HTTP round trips."""
    store = SyncJobStore.connect(settings)
    try:
        now = time.time()
        job = new_job(JobCreate(command="seeded"), rfc3339(now))
        for _ in range(count):
            store.run(ops.jobs.create(job, Placement.fixed(node_id), now))
    finally:
        store.close()


def test_list_pages_default_to_1000(
    make_settings: SettingsFactory, make_client: ClientFactory
) -> None:
    settings = make_settings()
    api = make_client(settings)
    _seed(settings, "n1", 1001)
    first = ids(api.get("/jobs"))
    assert first == [f"job-{n}" for n in range(1, 1001)]
    assert ids(api.get("/jobs?after=job-1000")) == ["job-1001"]
    assert len(ids(api.get("/jobs?limit=10000"))) == 1001
    newest = ids(api.get("/jobs?order=newest"))
    assert newest == [f"job-{n}" for n in range(1001, 1, -1)]
    assert ids(api.get("/jobs?order=newest&before=job-2")) == ["job-1"]


def test_a_page_stops_at_its_byte_budget_and_after_resumes(make_client: ClientFactory) -> None:
    """Big outputs: a page holds at most MAX_PAGE_BYTES (always at least one job); a client
    paging with after= still sees every job exactly once."""
    api = make_client(max_page_bytes=4096, max_jobs_per_node=10)
    register(api, "n1")
    for i in range(6):
        job_id = submit(api, command=f"echo {i}")["job_id"]
        assert report(api, job_id, "running").status_code == 200
        assert report(api, job_id, "done", exit_code=0, stdout="x" * 1500).status_code == 200

    first = api.get("/jobs").json()
    assert 1 <= len(first) < 6
    assert sum(len(msgspec.json.encode(job)) for job in first[:-1]) <= 4096

    seen, after = [], ""
    while page := api.get("/jobs", params={"after": after} if after else {}).json():
        seen += [job["job_id"] for job in page]
        after = page[-1]["job_id"]
    assert seen == [f"job-{n}" for n in range(1, 7)]


def test_a_full_nodes_queue_is_listed_with_a_paging_parameter(make_client: ClientFactory) -> None:
    """The agent's poll (node_id, status=pending, no paging) hands out free capacity only: [] on
    a full node. The same filters with limit, after, before or order are the operator's
    listing of the node's queue, behind the key, whatever the node runs."""
    api = make_client(api_key="k")
    register(api, "vm")
    key = {"Authorization": "Bearer k"}
    for i in range(4):
        assert api.post("/jobs", json={"command": f"c{i}"}, headers=key).status_code == 201
    assert report(api, "job-1", "running").status_code == 200
    poll = {"node_id": "vm", "status": "pending"}
    polled = api.get("/jobs", params=poll)
    assert assert_json(polled) == []  # the poll: vm is full
    assert polled.headers["x-max-jobs-per-node"] == "1"  # the agent says when it caps it
    queue = ["job-2", "job-3", "job-4"]
    assert ids(api.get("/jobs", params={**poll, "limit": 10}, headers=key)) == queue
    assert ids(api.get("/jobs", params={**poll, "after": "job-2"}, headers=key)) == queue[1:]
    newest = {**poll, "order": "newest", "before": "job-4"}
    assert ids(api.get("/jobs", params=newest, headers=key)) == ["job-3", "job-2"]
    # A listing is the key's: without it, 401 (the poll stays open, as the original's).
    assert api.get("/jobs", params={**poll, "limit": 10}).status_code == 401

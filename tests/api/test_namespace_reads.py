"""Issue 41, namespaces read (models/namespace.py scope): GET /jobs per namespace (exact, one
round trip: the namespace indexes, merged by number for a key limited to several), the UI's
search and counts, the events, the metrics, the CLI's and the client's listings; and the
attack: a key of one namespace listing another's (it reads nothing, as of a namespace
without jobs). Through Starlette and the hot lane where it takes the call."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from scheduler.api.http import UI_COOKIE
from scheduler.cli.main import main
from scheduler.client import Client, JobEvent
from scheduler.models.job import STATUSES
from scheduler.snapshot.db import restored_job, row_from_record
from scheduler.store.keys import Keys
from scheduler.store.scripts import upkeep
from scheduler.store.scripts.snapshot import restore_jobs
from scheduler.store.sync_store import SyncJobStore
from tests.api.test_events import backlog
from tests.api.test_namespaces import ADMIN, ADMIN_KEY, make_key, submit
from tests.api.test_roles import as_key
from tests.api.test_shards import LAYOUT, shard_nodes
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    CtxFactory,
    Serve,
    assert_json,
    assert_text_error,
)
from workers import firing

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


def everything(api: TestClient, count: int = 30) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = assert_json(api.get("/jobs", headers=ADMIN))
    assert len(jobs) == count
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


def events_of(api: TestClient, headers: dict[str, str], query: str = "") -> list[dict[str, Any]]:
    return [e["data"] for e in backlog(api, f"after=0&{query}", headers) if e["event"] == "job"]


def test_each_event_names_its_jobs_namespace_and_reads_by_namespace(api: TestClient) -> None:
    jobs = {job["job_id"]: namespace_of(job) for job in everything(api)}
    every = events_of(api, ADMIN)
    # Every change of the fixture: 30 made, 9 cancelled, job-3 run and done.
    assert len(every) == 30 + 9 + 2
    for event in every:
        assert event.get("namespace", "default") == jobs[event["job_id"]]
    assert all("namespace" not in event for event in every if jobs[event["job_id"]] == "default")
    for namespace in NAMESPACES:
        got = events_of(api, ADMIN, f"namespace={namespace}")
        assert got == [e for e in every if jobs[e["job_id"]] == namespace] and got
    assert events_of(api, ADMIN, "namespace=team-z") == []
    pending = events_of(api, ADMIN, "namespace=team-a&status=pending")
    assert {jobs[e["job_id"]] for e in pending} == {"team-a"} and len(pending) == 10


def test_a_limited_key_gets_only_its_namespaces_events(api: TestClient) -> None:
    jobs = {job["job_id"]: namespace_of(job) for job in everything(api)}
    every = events_of(api, ADMIN)
    key = as_key(make_key(api, "b", "reader", ["team-b"]))
    own = events_of(api, key)
    assert own == [e for e in every if jobs[e["job_id"]] == "team-b"] and own
    assert events_of(api, key, "namespace=team-b") == own
    for namespace in ("team-a", "default"):
        assert events_of(api, key, f"namespace={namespace}") == []
    # A job of another namespace named by id: nothing of it either.
    assert events_of(api, key, "job_id=job-1") == []


def namespace_gauges(text: str) -> dict[tuple[str, str], float]:
    found = {}
    for line in text.splitlines():
        if line.startswith("scheduler_namespace_jobs{"):
            labels, value = line.rsplit(" ", 1)
            pairs = dict(
                part.split("=", 1)
                for part in labels[len("scheduler_namespace_jobs{") : -1].split(",")
            )
            found[(pairs["namespace"].strip('"'), pairs["status"].strip('"'))] = float(value)
    return found


def metric_namespaces(api: TestClient) -> set[str]:
    """The namespaces /metrics counts jobs of."""
    gauges = namespace_gauges(api.get("/metrics", headers=ADMIN).text)
    return {namespace for namespace, _ in gauges}


def test_metrics_count_each_namespaces_jobs_by_status(api: TestClient) -> None:
    jobs = everything(api)
    response = api.get("/metrics", headers=ADMIN)
    assert response.status_code == 200
    gauges = namespace_gauges(response.text)
    for namespace in NAMESPACES:
        for status in STATUSES:
            wanted = sum(1 for j in jobs if namespace_of(j) == namespace and j["status"] == status)
            assert gauges[(namespace, status)] == wanted, (namespace, status)
    assert {ns for ns, _ in gauges} == set(NAMESPACES)
    assert "scheduler_jobs{" in response.text  # the deployment's, as before


def test_a_limited_keys_metrics_are_its_namespaces_alone(api: TestClient) -> None:
    """The deployment's families (jobs by status, nodes, requests) would tell team-a team-b's
    volumes: a limited key is answered its namespaces' counts and nothing else."""
    key = as_key(make_key(api, "ac", "reader", ["team-a", "team-c"]))
    response = api.get("/metrics", headers=key)
    assert response.status_code == 200
    gauges = namespace_gauges(response.text)
    assert {ns for ns, _ in gauges} == {"team-a", "team-c"}
    assert gauges[("team-a", "pending")] == 7 and gauges[("team-c", "pending")] == 0
    names = {
        line.split("{")[0].split(" ")[0]
        for line in response.text.splitlines()
        if line and not line.startswith("#")
    }
    assert names == {"scheduler_namespace_jobs"}


def test_the_namespaces_in_use_are_kept_rebuilt_by_a_restore_and_pruned(
    make_client: ClientFactory, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    """/metrics counts the namespaces of a set (keys_teams.py namespaces), not a SCAN: a
    create adds its job's, a restore into an empty Redis adds its jobs', a prune that empties
    one removes it. The default's is always counted, never added; the default's jobs are
    counted all the same."""
    api = make_client(api_key=ADMIN_KEY)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(api.post("/nodes/register", json=node, headers=ADMIN), 201)
    keys = Keys(prefix)
    for namespace in ("default", "team-a", "team-a"):
        made = submit(api, ADMIN, namespace=namespace)
        assert_json(api.delete(f"/jobs/{made['job_id']}", headers=ADMIN))  # failed: finished
    assert rclient.smembers(keys.namespaces) == {b"team-a"}
    counted = metric_namespaces(api)
    assert counted == {"default", "team-a"}
    records = [api.get(f"/jobs/job-{n}", headers=ADMIN).content for n in (1, 2, 3)]
    restored = [restored_job(row_from_record(record), time.time()) for record in records]
    empty = Keys(f"{prefix}-empty")
    call = restore_jobs(restored, mark_dirty=False)
    rclient.eval(call.script.text, 1, empty.root, *call.args)
    assert rclient.smembers(empty.namespaces) == {b"team-a"}
    rclient.delete(keys.dirty)  # as a snapshot that wrote them
    store.run(upkeep.prune_finished(time.time() + 1, 0, 1))  # job-1 (the default's) goes
    assert rclient.smembers(keys.namespaces) == {b"team-a"}
    assert metric_namespaces(api) == {"team-a"}  # the default holds no job: left out
    store.run(upkeep.prune_finished(time.time() + 1, 0, 1))  # one of team-a's: it stays
    assert rclient.smembers(keys.namespaces) == {b"team-a"}


@pytest.fixture
def served(serve: Serve) -> str:
    """An API over a socket (the CLI's and the client's), with the admin key and node n1,
    holding job-1..job-9 over the three NAMESPACES in turn."""
    url = serve(api_key=ADMIN_KEY, max_jobs_per_node=100)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert httpx.post(f"{url}/nodes/register", json=node, headers=ADMIN).status_code == 201
    for i in range(9):
        job = {"command": f"c{i}", "namespace": NAMESPACES[i % 3]}
        assert httpx.post(f"{url}/jobs", json=job, headers=ADMIN).status_code == 201
    return url


def run_cli(
    url: str,
    key: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *argv: str,
) -> tuple[int, str, str]:
    monkeypatch.setenv("SCHEDULER_URL", url)
    monkeypatch.setenv("TINYAWS_API_KEY", key)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_scheduler_list_namespace_lists_one_namespace_a_page_at_a_time(
    served: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(
        served, ADMIN_KEY, capsys, monkeypatch, "list", "--namespace", "team-a", "--limit", "2"
    )
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ["job_id=job-2", "job_id=job-5"]
    assert err == "more: scheduler list --namespace team-a --limit 2 --after job-5\n"
    code, out, err = run_cli(
        served,
        ADMIN_KEY,
        capsys,
        monkeypatch,
        "list",
        "--namespace",
        "team-a",
        "--limit",
        "2",
        "--after",
        "job-5",
    )
    assert [line.split()[0] for line in out.splitlines()] == ["job_id=job-8"] and err == ""
    code, out, _ = run_cli(
        served, ADMIN_KEY, capsys, monkeypatch, "list", "--namespace", "default", "--json"
    )
    assert [job["job_id"] for job in json.loads(out)] == ["job-1", "job-4", "job-7"]
    # A key of team-b: its own without --namespace, nothing of team-a's with it.
    made = httpx.post(
        f"{served}/keys",
        json={"name": "b", "role": "reader", "namespaces": ["team-b"]},
        headers=ADMIN,
    )
    key = made.json()["key"]
    code, out, _ = run_cli(served, key, capsys, monkeypatch, "list", "--json")
    assert [job["job_id"] for job in json.loads(out)] == ["job-3", "job-6", "job-9"]
    code, out, _ = run_cli(served, key, capsys, monkeypatch, "list", "--namespace", "team-a")
    assert (code, out) == (0, "")


def test_the_clients_jobs_and_events_take_a_namespace(served: str) -> None:
    with Client(served, api_key=ADMIN_KEY) as client:
        found = [job.job_id for job in client.jobs(namespace="team-a", page_size=2)]
        assert found == ["job-2", "job-5", "job-8"]
        newest = [job.job_id for job in client.jobs(namespace="default", newest=True)]
        assert newest == ["job-7", "job-4", "job-1"]
        assert {job.namespace for job in client.jobs(namespace="team-b")} == {"team-b"}
        changes = [
            item.change
            for item in client.events(namespace="team-b", since_start=True, follow=False)
            if isinstance(item, JobEvent)
        ]
        assert [(c.job_id, c.namespace) for c in changes] == [
            ("job-3", "team-b"),
            ("job-6", "team-b"),
            ("job-9", "team-b"),
        ]
        made = client.add_key("a", "reader", ["team-a"])
    with Client(served, api_key=made.key) as limited:
        assert [job.job_id for job in limited.jobs(page_size=2)] == ["job-2", "job-5", "job-8"]
        assert list(limited.jobs(namespace="team-b")) == []


def login(api: TestClient, key: str) -> dict[str, str]:
    """The Cookie header of a UI session logged in with `key`."""
    answer = api.post("/ui/login", data={"key": key}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    session = answer.cookies[UI_COOKIE]
    api.cookies.clear()
    return {"Cookie": f"{UI_COOKIE}={session}"}


def ui_ids(html_text: str) -> list[str]:
    """The job ids of a jobs page's table, in its order."""
    table = html_text.split('id="jobs"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<a href="/ui/jobs/(job-\d+)"', table)


def ui_count(html_text: str, name: str) -> int:
    found = re.search(rf'id="count-{name}"[^>]*>{name} (\d+)</a>', html_text)
    assert found, name
    return int(found.group(1))


def test_the_jobs_page_filters_by_namespace_and_a_limited_key_sees_its_own(
    api: TestClient,
) -> None:
    jobs = everything(api)
    admin = login(api, ADMIN_KEY)
    page = api.get("/ui/jobs", params={"namespace": "team-b"}, headers=admin)
    assert page.status_code == 200
    assert ui_ids(page.text) == expected(jobs, ("team-b",), "", True)
    assert page.text.count('<span class="muted ns">team-b</span>') == 10
    assert ui_count(page.text, "all") == 10 and ui_count(page.text, "pending") == 6
    assert 'href="/ui/jobs?status=pending&amp;namespace=team-b"' in page.text
    assert (
        '<input name="namespace" id="namespace" placeholder="namespace" value="team-b">'
        in page.text
    )
    failed = api.get("/ui/jobs", params={"namespace": "team-b", "status": "failed"}, headers=admin)
    assert ui_ids(failed.text) == expected(jobs, ("team-b",), "failed", True)

    key = make_key(api, "a", "reader", ["team-a"])
    mine = login(api, key)
    page = api.get("/ui/jobs", headers=mine)
    assert ui_ids(page.text) == expected(jobs, ("team-a",), "", True)
    assert ui_count(page.text, "all") == 10
    assert '<option value="team-a">team-a</option>' in page.text
    # Another namespace, asked for, or searched: nothing, and counts of none.
    other = api.get("/ui/jobs", params={"namespace": "team-b"}, headers=mine)
    assert ui_ids(other.text) == [] and ui_count(other.text, "all") == 0
    searched = api.get("/ui/jobs", params={"q": "x"}, headers=mine)
    assert ui_ids(searched.text) == expected(jobs, ("team-a",), "", True)
    searched = api.get("/ui/jobs", params={"q": "x", "namespace": "default"}, headers=mine)
    assert ui_ids(searched.text) == [] and ui_count(searched.text, "all") == 0
    refused = api.get("/ui/jobs", params={"node_id": "n1"}, headers=mine)
    assert refused.status_code == 400 and "takes no node_id" in refused.text


def test_the_dashboard_counts_each_namespace_and_a_limited_key_only_its_own(
    api: TestClient,
) -> None:
    everything(api)
    page = api.get("/ui", headers=login(api, ADMIN_KEY))
    assert page.status_code == 200
    table = page.text.split('id="namespaces"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'data-namespace="([^"]+)"', table) == ["default", "team-a", "team-b"]
    assert 'id="flow"' in page.text and 'id="node-load"' in page.text  # the deployment's
    one = api.get("/ui", params={"namespace": "team-a"}, headers=login(api, ADMIN_KEY))
    assert re.findall(r'data-namespace="([^"]+)"', one.text) == ["team-a"]

    mine = login(api, make_key(api, "a", "reader", ["team-a"]))
    page = api.get("/ui", headers=mine)
    assert re.findall(r'data-namespace="([^"]+)"', page.text) == ["team-a"]
    row = page.text.split('data-namespace="team-a"', 1)[1].split("</tr>", 1)[0]
    # all, then each status (pending, delayed, waiting, running, done, failed, cancelling).
    assert re.findall(r'<td class="num"[^>]*>(\d+)</td>', row) == [
        "10",
        "7",
        "0",
        "0",
        "0",
        "0",
        "3",
        "0",
    ]
    # Nothing of the deployment's: its charts, its nodes.
    assert 'id="flow"' not in page.text and 'id="node-load"' not in page.text
    other = api.get("/ui", params={"namespace": "team-b"}, headers=mine)
    assert "data-namespace=" not in other.text and ">no jobs<" in other.text


def test_a_schedules_jobs_by_namespace_are_whole_or_none(
    make_ctx: CtxFactory, make_client: ClientFactory
) -> None:
    """A schedule's jobs are all of its namespace: with a namespace (or by a limited key) its
    listing is whole, or empty for a key that may not read them."""
    ctx = make_ctx(api_key=ADMIN_KEY, node_ttl_secs=86400, schedule_grace_secs=86400)
    api = make_client(ctx.settings)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(api.post("/nodes/register", json=node, headers=ADMIN), 201)
    body = {"name": "tick", "every_secs": 10, "job": {"command": "tick"}}
    assert_json(api.post("/schedules", json=body, headers=ADMIN), 201)
    submit(api, ADMIN, namespace="team-a")
    [(_, first)] = ctx.redis.zrange(ctx.keys.schedules_due, 0, 0, withscores=True)
    for i in range(3):
        asyncio.run(firing.fire_due(ctx, first + i * 10 + 0.5, firing.node_source(ctx.settings)))
    made = [j["job_id"] for j in assert_json(api.get("/jobs?schedule=tick", headers=ADMIN))]
    assert len(made) == 3
    for query in ("schedule=tick&namespace=default", "schedule=tick&namespace=default&limit=2"):
        page = [j["job_id"] for j in assert_json(api.get(f"/jobs?{query}", headers=ADMIN))]
        assert page == made[: len(page)] and page
    assert assert_json(api.get("/jobs?schedule=tick&namespace=team-a", headers=ADMIN)) == []
    key = as_key(make_key(api, "a", "reader", ["team-a"]))
    assert assert_json(api.get("/jobs?schedule=tick", headers=key)) == []
    both = as_key(make_key(api, "ad", "reader", ["team-a", "default"]))
    assert [j["job_id"] for j in assert_json(api.get("/jobs?schedule=tick", headers=both))] == made


def test_a_sharded_deployments_namespace_listings_and_counts_cover_every_shard(
    make_client: ClientFactory,
) -> None:
    """Each shard keeps its own namespace indexes: a listing is merged from every shard's
    page, as any listing, and the counts are summed."""
    api = make_client(api_key=ADMIN_KEY, shards=3, max_jobs_per_node=100)
    for node in shard_nodes(0) + shard_nodes(1) + shard_nodes(2):
        body = {"id": node, "hostname": node, "cpu_count": 2, "role": "compute"}
        assert_json(api.post("/nodes/register", json=body, headers=ADMIN), 201)
    for i in range(24):
        submit(api, ADMIN, namespace=NAMESPACES[i % 3])
    jobs = everything(api, 24)
    assert {LAYOUT.job_shard(job["job_id"]) for job in jobs} == {0, 1, 2}
    key = as_key(make_key(api, "ab", "reader", ["team-a", "team-b"]))
    for newest, limit in itertools.product((False, True), (1, 3, 100)):
        got = paged(api, key, limit, newest)
        assert got == expected(jobs, ("team-a", "team-b"), "", newest), (newest, limit)
        got = paged(api, ADMIN, limit, newest, namespace="default")
        assert got == expected(jobs, ("default",), "", newest), (newest, limit)
    gauges = namespace_gauges(api.get("/metrics", headers=ADMIN).text)
    assert {(ns, n) for (ns, status), n in gauges.items() if status == "pending"} == {
        ("default", 8),
        ("team-a", 8),
        ("team-b", 8),
    }

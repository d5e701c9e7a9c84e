"""Prometheus /metrics: this process's requests by route and code with latency histograms,
the deployment's jobs, nodes, outbox and worker counters from Redis; behind the key."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from scheduler.api.routes import TABLE
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, register, report, submit


def scrape(api: TestClient, **kwargs: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = api.get("/metrics", **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_requests_jobs_nodes_and_counters(
    client: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    register(client, "n1", "n2")
    for _ in range(3):
        submit(client, command="x")
    report(client, "job-1", "running")
    assert client.get("/jobs/job-404").status_code == 404
    rclient.hincrby(Keys(prefix).stats, "publish_failures", 2)
    rclient.hincrby(Keys(prefix).stats, "timeouts", 1)
    m = scrape(client)
    req = "scheduler_http_requests_total"
    assert m[(req, (("code", "201"), ("method", "POST"), ("route", "/jobs")))] == 3
    assert m[(req, (("code", "404"), ("method", "GET"), ("route", "/jobs/{id}")))] == 1
    assert m[(req, (("code", "200"), ("method", "PATCH"), ("route", "/jobs/{id}")))] == 1
    latency = "scheduler_http_request_duration_seconds"
    posts = (("method", "POST"), ("route", "/jobs"))
    assert m[(f"{latency}_count", posts)] == 3
    assert m[(f"{latency}_bucket", (("le", "+Inf"), *posts))] == 3
    assert 0 < m[(f"{latency}_sum", posts)] < 3
    assert m[("scheduler_jobs", (("status", "pending"),))] == 2
    assert m[("scheduler_jobs", (("status", "running"),))] == 1
    assert m[("scheduler_node_jobs", (("node", "n1"), ("status", "running")))] == 1
    assert m[("scheduler_node_jobs", (("node", "n2"), ("status", "pending")))] == 1
    assert m[("scheduler_node_healthy", (("node", "n1"),))] == 1
    assert m[("scheduler_worker_events_total", (("event", "timeouts"),))] == 1
    assert m[("scheduler_sns_publish_failures_total", ())] == 2
    assert m[("scheduler_outbox_events", ())] == 0


def test_metrics_need_the_key_when_one_is_set(make_client: ClientFactory) -> None:
    api = make_client(api_key="k")
    assert api.get("/metrics").status_code == 401
    assert api.get("/jobs").status_code == 401
    m = scrape(api, headers={"Authorization": "Bearer k"})
    # The refusal was counted too: the counting sits outside the key check.
    key = ("code", "401"), ("method", "GET"), ("route", "/jobs")
    assert m[("scheduler_http_requests_total", key)] == 1


def test_metrics_off(make_client: ClientFactory) -> None:
    api = make_client(metrics="off")
    assert api.get("/metrics").status_code == 404
    assert api.get("/health").status_code == 200
    assert api.app.state.request_stats.codes == {}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "path, label",
    [
        ("/jobs", "/jobs"),
        ("/jobs/job-1", "/jobs/{id}"),
        ("/jobs/" + "x" * 5000, "/jobs/{id}"),
        ("/nodes/register", "/nodes/register"),
        ("/nodes/n1", "/nodes/{id}"),
        ("/services/svc-1", "/services/{id}"),
        ("/ui/jobs/job-3", "/ui"),
        ("/health", "/health"),
        ("/anything/else", "other"),
        ("/jobsx", "other"),
    ],
)
def test_route_labels_stay_a_small_set(path: str, label: str) -> None:
    assert TABLE.label(path) == label


@pytest.mark.parametrize(
    "method, target, label",
    [
        ("GET", "/jobs?node_id=n1&status=pending", "/jobs?poll"),
        ("GET", "/jobs?node_id=n1&status=pending&wait=20", "/jobs?poll&wait"),
        ("GET", "/jobs?node_id=n1&status=pending&limit=5", "/jobs"),  # a listing
        ("GET", "/jobs?status=pending", "/jobs"),
        ("GET", "/jobs/job-1?wait=5&status_not=pending", "/jobs/{id}?wait"),
        ("GET", "/jobs/job-1", "/jobs/{id}"),
        ("POST", "/jobs?node_id=n1&status=pending", "/jobs"),
    ],
)
def test_polls_and_long_polls_have_labels_of_their_own(
    method: str, target: str, label: str
) -> None:
    path, _, query = target.partition("?")
    assert TABLE.request_label(method, path, query.encode()) == label


def test_the_polls_latency_is_apart_from_the_listings(client: TestClient) -> None:
    """The agents' polls (and their 20 s long-polls) are not mixed into GET /jobs's reads."""
    register(client, "n1")
    client.get("/jobs", params={"node_id": "n1", "status": "pending"})
    client.get("/jobs", params={"node_id": "n1", "status": "pending", "wait": "0"})
    client.get("/jobs")
    m = scrape(client)
    count = "scheduler_http_request_duration_seconds_count"
    for route in ("/jobs", "/jobs?poll", "/jobs?poll&wait"):
        assert m[(count, (("method", "GET"), ("route", route)))] == 1, route


LABELS = {f"label-{i:02d}": f"value-{i:02d}" for i in range(16)}


def fake_nodes(api: TestClient, count: int) -> None:
    """`count` nodes of 16 labels each, as anyone registers them in open mode."""
    for i in range(count):
        body = {"id": f"fake-{i:04d}", "hostname": f"h{i}", "cpu_count": 2, "labels": LABELS}
        assert api.post("/nodes/register", json=body).status_code == 201


def test_nodes_are_counted_and_only_the_busy_or_drained_named(client: TestClient) -> None:
    """Issue 36, finding 7: 3,000 fake nodes made every scrape 659 KB, four series a node,
    mostly zeros. Now they are counted; a node is named while it holds a job or is drained."""
    fake_nodes(client, 200)
    busy = {submit(client, command="x")["node_id"] for _ in range(3)}
    idle = sorted({f"fake-{i:04d}" for i in range(200)} - busy)
    assert client.post(f"/nodes/{idle[0]}/drain").status_code == 200
    m = scrape(client)
    named = {dict(labels)["node"] for (_, labels) in m if dict(labels).get("node")}
    assert named == busy | {idle[0]}
    assert m[("scheduler_nodes", (("status", "healthy"),))] == 200
    assert m[("scheduler_nodes", (("status", "unhealthy"),))] == 0
    assert m[("scheduler_nodes_drained", ())] == 1
    assert m[("scheduler_node_drained", (("node", idle[0]),))] == 1
    for node in busy:
        assert m[("scheduler_node_jobs", (("node", node), ("status", "pending")))] == 1


def test_the_nodes_are_read_in_pieces(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """No script reads every node (one did, 100 ms of Redis with 3,000 nodes of 16 labels):
    NODE_LOADS scans them PIECE at a time (here 40), and the pieces make the whole: every
    node once in the UI's nodes page, with its jobs."""
    from scheduler.store.scripts import overview

    fake_nodes(client, 300)  # past 128, ZSCAN's one-answer encoding of a small set
    job = submit(client, command="x")
    sizes: list[int] = []
    read = overview.NODE_LOADS.reply

    def counted(reply: Any) -> overview.Piece:
        piece = read(reply)
        sizes.append(len(piece.queues))
        return piece

    monkeypatch.setattr(overview, "PIECE", 40)
    monkeypatch.setattr(overview.NODE_LOADS, "reply", counted)
    page = client.get("/ui/nodes").text
    assert len(sizes) >= 300 // 80 and max(sizes) <= 80, sizes
    rows = page.split('<table class="cards" id="nodes">', 1)[1].split("</table>", 1)[0]
    assert rows.count('<tr id="node-fake-') == 300
    assert f'<tr id="node-{job["node_id"]}">' in rows

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

"""Prometheus metrics at /metrics (behind the key when one is set).

Request counts and latencies are this process's own, counted by a pure ASGI middleware in
plain integers (a dict lookup, a bisect and three additions a request: measured in
benchmarks/metrics_cost.py), and turned into Prometheus families only when scraped. Job,
node, outbox and background-work figures are the deployment's, read from Redis at scrape
time in one round trip (store/scripts/nodes.py, OVERVIEW), so any replica answers them alike.
The old-layout gauge is the process's last periodic check (api/upgrade.py): no round trip.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from time import perf_counter

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.nodes.placement import is_live
from scheduler.store.jobs import JobStore
from scheduler.store.scripts.overview import Overview

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class _Series:
    count: int = 0
    total: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))


class RequestStats:
    """Per (method, route, code) one flat row: count, total seconds, one count per bucket.
    One dict lookup a request; the families are summed from the rows only when scraped."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, int], list[float]] = {}

    def observe(self, method: str, route: str, code: int, seconds: float) -> None:
        key = (method, route, code)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0.0] * (len(BUCKETS) + 3)
        row[0] += 1
        row[1] += seconds
        row[2 + bisect.bisect_left(BUCKETS, seconds)] += 1

    @property
    def codes(self) -> dict[tuple[str, str, int], int]:
        return {key: int(row[0]) for key, row in self.rows.items()}

    @property
    def latency(self) -> dict[tuple[str, str], _Series]:
        series: dict[tuple[str, str], _Series] = {}
        for (method, route, _), row in self.rows.items():
            summed = series.setdefault((method, route), _Series())
            summed.count += int(row[0])
            summed.total += row[1]
            summed.buckets = [a + int(b) for a, b in zip(summed.buckets, row[2:], strict=True)]
        return series


class RequestMetrics:
    """Pure ASGI middleware, outermost, so refusals (401, 413, 503) are counted too. `label`
    is the route table's (routing.RouteTable.label): a request's route label."""

    def __init__(self, app: ASGIApp, stats: RequestStats, label: Callable[[str], str]) -> None:
        self.app = app
        self.stats = stats
        self.label = label

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = perf_counter(), [500]

        async def send_status(message: Message) -> None:
            if "status" in message:  # http.response.start, the only message that has one
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = self.label(scope["path"])
            self.stats.observe(scope["method"], route, status[0], perf_counter() - started)


class _Scrape(Collector):
    """One scrape's families: this process's requests, the deployment's state."""

    def __init__(
        self, stats: RequestStats, view: Overview, node_ttl: float, now: float, old_layout: int
    ) -> None:
        self.stats, self.view, self.node_ttl, self.now = stats, view, node_ttl, now
        self.old_layout = old_layout

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._jobs()
        yield from self._nodes()
        yield from self._background()

    def _requests(self) -> Iterator[Metric]:
        labels = ["method", "route", "code"]
        counts = CounterMetricFamily("scheduler_http_requests", "HTTP requests", labels=labels)
        for (method, route, code), n in sorted(self.stats.codes.items()):
            counts.add_metric([method, route, str(code)], n)
        yield counts
        latency = HistogramMetricFamily(
            "scheduler_http_request_duration_seconds",
            "Time from request to response, this process",
            labels=["method", "route"],
        )
        for (method, route), series in sorted(self.stats.latency.items()):
            cumulative, running = [], 0
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), series.buckets, strict=True):
                running += n
                cumulative.append((bound, running))
            latency.add_metric([method, route], cumulative, series.total)
        yield latency

    def _jobs(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("scheduler_jobs", "Jobs in Redis by status", labels=["status"])
        for status, n in sorted(self.view.by_status.items()):
            jobs.add_metric([status], n)
        yield jobs

    def _nodes(self) -> Iterator[Metric]:
        queued = GaugeMetricFamily(
            "scheduler_node_jobs", "A node's pending and running jobs", labels=["node", "status"]
        )
        healthy = GaugeMetricFamily(
            "scheduler_node_healthy", "1 while heard from within NODE_TTL_SECS", labels=["node"]
        )
        for node, (pending, running) in sorted(self.view.queues.items()):
            queued.add_metric([node, "pending"], pending)
            queued.add_metric([node, "running"], running)
            seen = self.view.last_seen.get(node, 0.0)
            healthy.add_metric([node], 1 if is_live(seen, self.now, self.node_ttl) else 0)
        yield queued
        yield healthy

    def _background(self) -> Iterator[Metric]:
        events = CounterMetricFamily(
            "scheduler_worker_events",
            "The workers' counters (timeouts, requeued, sqs_dropped, events_published, ...)",
            labels=["event"],
        )
        for name, n in sorted(self.view.stats.items()):
            events.add_metric([name], n)
        yield events
        failures = self.view.stats.get("publish_failures", 0)
        yield CounterMetricFamily(
            "scheduler_sns_publish_failures", "SNS publish attempts that failed", value=failures
        )
        yield GaugeMetricFamily(
            "scheduler_outbox_events", "Events not yet handed to SNS", value=self.view.outbox
        )
        yield GaugeMetricFamily(
            "scheduler_old_layout_findings",
            "Signs of the layout before the hash tag in use (old processes, old keys), as this "
            "process last checked; 0 once the upgrade is done and the old version gone",
            value=self.old_layout,
        )


async def metrics(request: Request) -> Response:
    store: JobStore = request.app.state.store
    stats: RequestStats = request.app.state.request_stats
    view = await store.overview()
    registry = CollectorRegistry(auto_describe=False)
    old_layout = len(request.app.state.old_layout.findings)
    registry.register(_Scrape(stats, view, store.settings.node_ttl_secs, time.time(), old_layout))
    ProcessCollector(registry=registry, pid=lambda: os.getpid())
    return Response(generate_latest(registry), media_type=CONTENT_TYPE)

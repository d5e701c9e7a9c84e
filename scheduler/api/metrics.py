"""Prometheus metrics at /metrics (behind the key when one is set): the deployment's, whichever
API process answers.

Request counts and latencies are counted in each process by a pure ASGI middleware (and the
hot lane) in plain integers (a dict lookup, a bisect and three additions a request: measured
in benchmarks/metrics_cost.py). Every METRICS_FLUSH_SECS a process adds what it counted since
to one Redis hash (`{P}:stats:requests`), and a scrape adds its own and reads the sums back in
the same call: successive scrapes of any process, or of a load balancer in front of many,
read one set of counters that only grow (a process counted but not yet flushed shows on the
next scrape). Before, each process answered its own, and a scrape through a load balancer
read counters that went 25, 8, 25. Job, node, outbox and background-work figures are read
from Redis at scrape time (store/scripts/overview.py: the counts, and the nodes in pieces). The
old-layout gauge is the process's last periodic check (api/upgrade.py): no round trip.
Per-node series are for the nodes that hold a job or are drained; the rest are counted.
Jobs are also counted per namespace (`scheduler_namespace_jobs`, the namespace indexes'
ZCARDs). A key limited to namespaces is answered those of its namespaces and nothing else:
every other family is the deployment's (jobs by status, nodes' queues, requests by route,
the workers' counters) and would tell one team another's volumes.
Per-process figures (CPU, memory, start time) are left to the host's own exporter: from a
load balancer they alternate between processes.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
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
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.api.http import caller
from scheduler.api.state import old_layout as _old_layout
from scheduler.api.stores import Store
from scheduler.models.job import STATUSES
from scheduler.models.namespace import scope, shown
from scheduler.nodes.placement import is_live
from scheduler.store import ops
from scheduler.store.scripts.overview import Overview

log = logging.getLogger("scheduler.api")

FINAL_FLUSH_SECS = 2.0  # a stopping process's last flush waits no longer for Redis
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class _Series:
    count: int = 0
    total: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))


RowKey = tuple[str, str, int]  # method, route label, status code
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A row's columns, as named in Redis: count, total seconds, one count per bucket.
COLUMNS = ("count", "sum", *map(str, BUCKETS), "+Inf")


class RequestStats:
    """Per (method, route, code) one flat row: count, total seconds, one count per bucket.
    One dict lookup a request; the families are summed from the rows only when scraped."""

    def __init__(self, rows: dict[RowKey, list[float]] | None = None) -> None:
        self.rows: dict[RowKey, list[float]] = rows if rows is not None else {}

    @classmethod
    def from_sums(cls, sums: dict[str, float]) -> RequestStats:
        """The rows of the deployment's hash (`deltas`' fields); a column this version does
        not know (a bucket of another version) is left out."""
        rows: dict[RowKey, list[float]] = {}
        index = {name: i for i, name in enumerate(COLUMNS)}
        for name, value in sums.items():
            method, route, code, column = name.split(" ")
            if column in index and code.isdigit():
                row = rows.setdefault((method, route, int(code)), [0.0] * len(COLUMNS))
                row[index[column]] = value
        return cls(rows)

    def take(self) -> dict[RowKey, list[float]]:
        """The rows counted since the last take; counting starts again from nothing."""
        taken, self.rows = self.rows, {}
        return taken

    def give_back(self, taken: dict[RowKey, list[float]]) -> None:
        """Rows taken but not stored (Redis did not answer): counted again with the next."""
        for key, row in taken.items():
            mine = self.rows.setdefault(key, [0.0] * len(COLUMNS))
            for i, value in enumerate(row):
                mine[i] += value

    def observe(self, method: str, route: str, code: int, seconds: float) -> None:
        # A fixed set of labels whatever clients send: h11 takes any token as a method, and
        # each would be a series kept for good (in Redis too).
        key = (method if method in METHODS else "other", route, code)
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


def deltas(rows: dict[RowKey, list[float]]) -> dict[str, float]:
    """The rows as the hash's fields, `"<method> <route> <code> <column>"`: the zeros left out."""
    return {
        f"{method} {route} {code} {column}": value
        for (method, route, code), row in rows.items()
        for column, value in zip(COLUMNS, row, strict=True)
        if value
    }


async def flush(store: Store, stats: RequestStats, read: bool = False) -> RequestStats:
    """Adds this process's counts since its last flush to the deployment's; with `read`, the
    deployment's sums. Counts Redis did not take are kept for the next flush (a reply lost
    after Redis ran the script counts them twice: the rarer and smaller error)."""
    taken = stats.take()
    try:
        sums = await store.run(ops.listings.add_request_stats(deltas(taken), read))
    except BaseException:
        stats.give_back(taken)
        raise
    return RequestStats.from_sums(sums)


async def keep_flushing(store: Store, stats: RequestStats, every: float) -> None:
    """The API process's flush every METRICS_FLUSH_SECS, until cancelled (then once more)."""
    try:
        while True:
            await asyncio.sleep(every)
            if stats.rows:
                try:
                    await flush(store, stats)
                except Exception as exc:  # Redis away: kept, and tried again next time
                    log.debug("request metrics not flushed: %s", exc)
    finally:
        if stats.rows:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(flush(store, stats), FINAL_FLUSH_SECS)


class RequestMetrics:
    """Pure ASGI middleware, outermost, so refusals (401, 413, 503) are counted too. `label`
    is the route table's (routing.RouteTable.request_label): a request's label from its
    method, path and query (the agent's poll and the long-polls apart)."""

    def __init__(
        self, app: ASGIApp, stats: RequestStats, label: Callable[[str, str, bytes], str]
    ) -> None:
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
            route = self.label(scope["method"], scope["path"], scope.get("query_string", b""))
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
            "Time from request to response, every API process of the deployment",
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
        """How many nodes are healthy, unhealthy and drained; and a node's own series only
        while it holds a job or is drained: what an operator acts on. Every node's (four
        series each, mostly zeros) made a scrape of 3,000 nodes 629 KiB; GET /nodes and the UI
        list them all."""
        live = {
            node: is_live(self.view.last_seen.get(node, 0.0), self.now, self.node_ttl)
            for node in self.view.queues
        }
        nodes = GaugeMetricFamily(
            "scheduler_nodes",
            "Nodes by health (heard from within NODE_TTL_SECS)",
            labels=["status"],
        )
        nodes.add_metric(["healthy"], sum(live.values()))
        nodes.add_metric(["unhealthy"], len(live) - sum(live.values()))
        yield nodes
        yield GaugeMetricFamily(
            "scheduler_nodes_drained",
            "Nodes drained (POST /nodes/{id}/drain): no new job goes to them",
            value=sum(1 for node in live if node in self.view.drained),
        )
        queued = GaugeMetricFamily(
            "scheduler_node_jobs", "A node's pending and running jobs", labels=["node", "status"]
        )
        healthy = GaugeMetricFamily(
            "scheduler_node_healthy", "1 while heard from within NODE_TTL_SECS", labels=["node"]
        )
        drained = GaugeMetricFamily(
            "scheduler_node_drained",
            "1 while drained (POST /nodes/{id}/drain): no new job goes to the node",
            labels=["node"],
        )
        for node, (pending, running, *_) in sorted(self.view.queues.items()):
            if not (pending or running or node in self.view.drained):
                continue
            queued.add_metric([node, "pending"], pending)
            queued.add_metric([node, "running"], running)
            healthy.add_metric([node], 1 if live[node] else 0)
            drained.add_metric([node], 1 if node in self.view.drained else 0)
        yield queued
        yield healthy
        yield drained

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


class _Namespaces(Collector):
    """The jobs of each namespace counted (ops.listings.namespace_counts), by status."""

    def __init__(self, counts: dict[str, list[int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "scheduler_namespace_jobs",
            "Jobs in Redis by namespace and status",
            labels=["namespace", "status"],
        )
        for namespace, counts in sorted(self.counts.items()):
            for status, n in zip(STATUSES, counts[1:], strict=True):
                jobs.add_metric([shown(namespace), status], n)
        yield jobs


async def metrics(request: Request) -> Response:
    store: Store = request.app.state.store
    stats: RequestStats = request.app.state.request_stats
    registry = CollectorRegistry(auto_describe=False)
    covered = scope(caller(request).namespaces, "")
    if covered is not None:  # a key limited to namespaces: theirs alone
        counts = await store.run(ops.listings.namespace_counts(covered))
        registry.register(_Namespaces(counts))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE)
    # Sent together, so one round trip on the connection.
    view, totals, counts = await asyncio.gather(
        store.run(ops.listings.overview()),
        flush(store, stats, read=True),
        store.run(ops.listings.namespace_counts()),
    )
    old_layout = len(_old_layout(request).findings)
    now = time.time()
    registry.register(_Scrape(totals, view, store.settings.node_ttl_secs, now, old_layout))
    registry.register(_Namespaces(counts))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE)

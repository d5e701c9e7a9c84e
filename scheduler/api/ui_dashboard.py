"""The web UI's home, /ui: is work flowing? Over the last hour (a column a minute) or the
last day (`window=day`: a column per 15 minutes), the jobs submitted, started, done and
failed; the jobs waiting and running; the time from submit to running (p50, p95); and per
node, its running jobs against its capacity and its heartbeat's age.

Drawn from the per-minute hashes the job-changing scripts keep (models/series.py, series.lua
SERIES) and the live counts (OVERVIEW), both read in one round trip: any API replica draws
the same picture. The charts are ui_charts.py's inline SVG.

Below them, each namespace's jobs by status (the namespace indexes' counts:
ops.listings.namespace_counts), or one namespace's (`namespace=`). The charts and the nodes
are the deployment's, every namespace's together (the per-minute hashes are not kept per
namespace): a key limited to namespaces is shown its namespaces' counts alone, as /metrics
answers it, since the rest would tell it the other teams' volumes."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from html import escape

from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.http import HTTPError, caller
from scheduler.api.params import param
from scheduler.api.state import settings as _settings
from scheduler.api.state import store as _store
from scheduler.api.ui_charts import (
    BLUE,
    GREEN,
    ORANGE,
    PURPLE,
    SKY,
    VERMILLION,
    Line,
    chart,
    grouped,
    legend,
    load_bar,
    nice_top,
)
from scheduler.api.ui_layout import View, card_cells, page, status_badge, view_of
from scheduler.models.job import STATUSES
from scheduler.models.namespace import check_namespace, scope, shown
from scheduler.models.series import (
    BUCKETS,
    WAIT_BOUNDS,
    Column,
    column,
    columns,
    filled,
    minute_of,
)
from scheduler.models.spans import span
from scheduler.nodes.placement import is_live
from scheduler.store import ops
from scheduler.store.scripts.overview import Overview

WINDOW = "window"  # the query parameter: "day", or none for the hour
# A window: its minutes, and the minutes drawn as one column.
WINDOWS = {"hour": (60, 1), "day": (1440, 15)}
READS = (WINDOW, "namespace")

FLOW = (("submitted", BLUE, ""), ("started", ORANGE, "6 3"), ("done", GREEN, "2 2"))
FAILED = ("failed", VERMILLION, "8 3 2 3")
# The throughput's lines count jobs (submitted; ended done, failed: as the jobs list counts
# them) but for `started`, which counts claims: every attempt's start, a retry's too (series.lua
# count_started). Called so, or "started 5" beside "failed 1" read as five jobs.
CALLED = {"started": "attempts started"}
FLOW_NOTE = (
    "Jobs submitted, and jobs that ended done or failed (a cancelled job ends failed, and a "
    "job retried by hand counts each time it ends); attempts started counts every start, a "
    "retry's too: a job retried once counts two. The jobs list's tabs count the jobs in each "
    "status now."
)


def window_of(request: Request) -> str:
    raw = param(request, WINDOW)
    if raw not in ("", "hour", "day"):
        raise HTTPError(400, "invalid window: use window=day, or leave it out for the hour")
    return raw or "hour"


async def dashboard(request: Request) -> Response:
    view, window = view_of(request), window_of(request)
    asked, limited = param(request, "namespace"), caller(request).namespaces
    check_namespace(asked)
    minutes, width = WINDOWS[window]
    first = minute_of(view.now) - minutes + 1
    store = _store(request)
    by_namespace = store.run(ops.listings.namespace_counts(scope(limited, asked)))
    if limited:  # the deployment's charts would show the other namespaces' volumes
        counts = await by_namespace
        body = _namespaces(counts, view, asked, limited)
        return page(request, "Dashboard", body, refresh=True, view=view)
    # Sent together on the one connection: one round trip.
    live, rows, counts = await asyncio.gather(
        store.run(ops.listings.overview()),
        store.run(ops.listings.series(first, minutes)),
        by_namespace,
    )
    drawn = columns(first, rows, width)
    labels = [_label(c) for c in drawn]
    whole = column(first, rows)
    body = (
        _windows(view, window, asked)
        + _flow(drawn, labels, whole)
        + _queue(drawn, labels, live)
        + _waits(drawn, labels, whole)
        + _nodes(live, view, _settings(request).max_jobs_per_node, _settings(request).node_ttl_secs)
        + _namespaces(counts, view, asked, limited)
    )
    return page(request, "Dashboard", body, refresh=True, view=view)


def _windows(view: View, window: str, namespace: str) -> str:
    links = []
    for name, said in (("hour", "Last hour"), ("day", "Last day")):
        if name == window:
            links.append(f'<a class="current" id="window-{name}">{said}</a>')
        else:
            target = view.href("/ui", window="" if name == "hour" else name, namespace=namespace)
            links.append(f'<a id="window-{name}" href="{target}">{said}</a>')
    return f'<nav class="counts">{"".join(links)}</nav>'


def _label(col: Column) -> str:
    """A column's time as UTC "HH:MM" (and its span when it is several minutes)."""
    start = time.strftime("%H:%M", time.gmtime(col.first * 60))
    if col.minutes == 1:
        return start
    return f"{start}-{time.strftime('%H:%M', time.gmtime((col.first + col.minutes) * 60))}"


def _axis(drawn: Sequence[Column], labels: Sequence[str]) -> str:
    """The times under a chart, in HTML (readable at any width): its first column's (UTC),
    and how long ago the window starts and its middle is."""
    if not labels:
        return ""
    minutes = sum(c.minutes for c in drawn)
    shown = (
        f"{span(minutes * 60)} ago ({labels[0]} UTC)",
        f"{span(minutes * 30)} ago",
        "now",
    )
    return '<div class="axis">' + "".join(f"<span>{escape(t)}</span>" for t in shown) + "</div>"


def _top(said: str) -> str:
    """The chart's unit, above its y axis."""
    return f'<div class="unit">{escape(said)}</div>'


def _flow(drawn: Sequence[Column], labels: Sequence[str], whole: Column) -> str:
    lines = [
        Line(name, colour, dash, [c.counts[name] for c in drawn], label=CALLED.get(name, ""))
        for name, colour, dash in (*FLOW, FAILED)
    ]
    top = nice_top(max((v or 0 for line in lines for v in line.values), default=0))
    figures = {name: grouped(whole.counts[name]) for name in whole.counts}
    return (
        "<h2>Throughput</h2>"
        + f'<p class="muted" id="flow-note">{FLOW_NOTE}</p>'
        + legend(lines, figures)
        + _top(f"per {'minute' if drawn and drawn[0].minutes == 1 else '15 min'}")
        + chart("flow", labels, lines, top)
        + _axis(drawn, labels)
    )


# The queue chart's lines: (its name on the page, the gauge it draws, what it is called).
# The gauge "waiting" (models/series.py, series.lua sample_gauges: kept so stored minutes
# still read) counts the pending and the delayed jobs, not the `waiting` status: it is
# called by the statuses it counts.
QUEUE = (("queued", "waiting", "pending + delayed"), ("running", "running", "running"))


def _queue(drawn: Sequence[Column], labels: Sequence[str], live: Overview) -> str:
    now = {
        "queued": live.by_status.get("pending", 0) + live.by_status.get("delayed", 0),
        "running": live.by_status.get("running", 0),
    }
    style = {"queued": (PURPLE, "6 3"), "running": (SKY, "")}
    lines = [
        Line(name, *style[name], filled([c.gauges[gauge] for c in drawn], now[name]), label=said)
        for name, gauge, said in QUEUE
    ]
    top = nice_top(max((v or 0 for line in lines for v in line.values), default=0))
    figures = {name: f"{grouped(value)} now" for name, value in now.items()}
    return (
        "<h2>Pending and running</h2>"
        + legend(lines, figures)
        + _top("jobs")
        + chart("queue", labels, lines, top)
        + _axis(drawn, labels)
    )


def _bound(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return f"> {span(WAIT_BOUNDS[-1])}"
    return f"≤ {span(value)}"


def _rank(value: float | None) -> float | None:
    """A wait's bucket bound as its height on the chart: the buckets evenly spaced (a log
    scale, near enough), the longest at the top."""
    if value is None:
        return None
    return float(BUCKETS if math.isinf(value) else WAIT_BOUNDS.index(value) + 1)


def _wait_ticks() -> tuple[str, str, str]:
    """The waits chart's y axis at its grid lines: the longest bucket, the middle rank's
    bound, 0."""
    middle = WAIT_BOUNDS[BUCKETS // 2 - 1]
    return _bound(math.inf), span(middle), "0"


def _waits(drawn: Sequence[Column], labels: Sequence[str], whole: Column) -> str:
    quantiles = (("p50", BLUE, "", 0.5), ("p95", ORANGE, "6 3", 0.95))
    lines, figures = [], {}
    for name, colour, dash, q in quantiles:
        bounds = [c.percentile(q) for c in drawn]
        data = ["" if b is None else "inf" if math.isinf(b) else f"{b:g}" for b in bounds]
        said = [_bound(b) for b in bounds]
        lines.append(Line(name, colour, dash, [_rank(b) for b in bounds], data, said))
        figures[name] = _bound(whole.percentile(q))
    return (
        "<h2>Time from runnable to running</h2>"
        '<p class="muted">A first attempt\'s wait from when it could run (its submit, its '
        "due time, its last dependency done, a retry by hand) to its claim; a bucket a step "
        "up the scale: 0.1 s, 0.25 s, ... 30 min.</p>"
        + legend(lines, figures)
        + chart("waits", labels, lines, float(BUCKETS), _wait_ticks())
        + _axis(drawn, labels)
    )


def _nodes(live: Overview, view: View, capacity: int, ttl: float) -> str:
    rows = []
    for node_id in sorted(live.queues):
        _, _, slots, services = live.queues[node_id]
        seen = live.last_seen.get(node_id, 0.0)
        health = "healthy" if is_live(seen, view.now, ttl) else "unhealthy"
        age = span(max(0.0, view.now - seen)) if seen else "never"
        link = f'<a href="{view.href("/ui/jobs", node_id=node_id)}">{escape(node_id)}</a>'
        cells = (
            link,
            load_bar(slots, capacity, services),
            status_badge(health),
            escape(age),
        )
        rows.append(
            f'<tr data-node="{escape(node_id)}">'
            + "".join(f"<td>{c}</td>" for c in cells)
            + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("node", "running / capacity", "health", "heartbeat age")
    )
    nodes = "".join(rows) or '<tr><td colspan="4">no nodes</td></tr>'
    table = f'<table id="node-load"><tr>{head}</tr>{nodes}</table>'
    return f'<h2>Nodes</h2><div class="scroll">{table}</div>'


def _namespace_filter(view: View, asked: str, limited: tuple[str, ...]) -> str:
    """Which namespaces the table shows: a limited key's own to choose from; any key's
    typed otherwise."""
    if limited:
        options = "".join(
            f'<option value="{escape(n)}"{" selected" if n == asked else ""}>'
            f"{escape(n or 'my namespaces')}</option>"
            for n in ("", *limited)
        )
        field = f'<select name="namespace" id="namespace">{options}</select>'
    else:
        field = (
            f'<input name="namespace" id="namespace" placeholder="every namespace" '
            f'value="{escape(asked)}">'
        )
    return (
        '<form class="filters" method="get" action="/ui">'
        f'{field}{view.hidden()}<button id="filter">Show</button></form>'
    )


def _namespaces(
    counts: dict[str, list[int]], view: View, asked: str, limited: tuple[str, ...]
) -> str:
    """Each namespace's jobs, in all and by status (a card of labelled counts on a phone's
    width, as the jobs list); its name links to its jobs list."""
    headings = ("namespace", "all", *STATUSES)
    head = "".join(f"<th>{h}</th>" for h in headings)
    rows = []
    for stored_name, numbers in sorted(counts.items()):
        name = shown(stored_name)
        link = f'<a href="{view.href("/ui/jobs", namespace=name)}">{escape(name)}</a>'
        shown_cells = (("", link), *((' class="num"', grouped(n)) for n in numbers))
        cells = card_cells(headings, shown_cells)
        rows.append(f'<tr data-namespace="{escape(name)}">{cells}</tr>')
    empty = f'<tr><td colspan="{len(headings)}">no jobs</td></tr>'
    table = f'<table class="cards" id="namespaces"><tr>{head}</tr>{"".join(rows) or empty}</table>'
    mine = '<p class="muted">The jobs of your key\'s namespaces.</p>' if limited else ""
    return (
        "<h2>Namespaces</h2>"
        + mine
        + _namespace_filter(view, asked, limited)
        + f'<div class="scroll">{table}</div>'
    )

"""The web UI's nodes page (/ui/nodes): each node with its health, heartbeat, what it offers
(cpus, memory, labels, as the node source reports it: GET /nodes), its pending jobs and its
running ones against MAX_JOBS_PER_NODE, and its drain button; the services; the jobs by
status; the background counters, each with what it counts in words.

The counts and the node list come from the overview (OVERVIEW, NODE_LOADS: no script reads
a node's record, issue 36); what each node offers from the node source: an external
registry behind its cache, or the built-in registry's records in Redis, read in one command
only while there are at most OFFERS_MAX nodes (500 nodes with 16 labels: about 0.4 MB, a few
ms of Redis); past that the page says GET /nodes has them. A registry that does not answer
leaves those cells empty and says so: the page still shows the queues and the drains.
"""

from __future__ import annotations

import asyncio
from html import escape

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.http import caller
from scheduler.api.state import node_source as _node_source
from scheduler.api.state import settings as _settings
from scheduler.api.state import store as _store
from scheduler.api.ui_charts import grouped, load_bar
from scheduler.api.ui_forms import csrf as _csrf
from scheduler.api.ui_forms import may_post
from scheduler.api.ui_layout import View, card_cells, page, status_badge, view_of
from scheduler.models.job import STATUSES
from scheduler.models.registry import Node, Service
from scheduler.nodes.placement import is_live
from scheduler.nodes.registry import RegistryError
from scheduler.store import ops
from scheduler.store.scripts.overview import PIECE, Queue

service_decoder = msgspec.json.Decoder(Service)

NODE_HEADINGS = (
    "node", "health", "last heartbeat", "cpus", "memory", "labels", "pending",
    "running / capacity", "drain",
)  # fmt: skip
# What each background counter counts (workers/: tasks.py, firing.py, ingest.py name them),
# since the last time Redis was emptied. A counter not listed here shows its name only.
COUNTER_WORDS = {
    "timeouts": "jobs failed for running past their timeout (JOB_TIMEOUT_SECS)",
    "lost": "running jobs whose node was lost: retried elsewhere, or failed node_lost",
    "requeued": "pending jobs moved off a lost node to a live one",
    "cancelled_by_sweep": "cancelled running jobs ended after the grace, no agent having confirmed",
    "pruned": "finished jobs removed from Redis past JOB_RETENTION_SECS",
    "promoted": "delayed jobs made pending when due",
    "placed": "jobs without a node placed once one had room",
    "settle_calls": "calls settling the jobs that wait for a large ending",
    "outbox_malformed": "job events dropped because they could not be read",
    "events_discarded": "job events not sent because SNS_URL is not set (as the original)",
    "events_enqueued": "job events queued for SNS",
    "events_published": "job events published to SNS",
    "publish_failures": "SNS publishes that failed (each is retried)",
    "sqs_received": "SQS messages received",
    "sqs_created": "jobs created from SQS messages",
    "sqs_duplicates": "SQS messages already ingested (redelivered), not made twice",
    "sqs_unplaced": "SQS messages left for redelivery: no node could take the job",
    "sqs_dropped": "SQS messages dropped: their body was not a valid job",
    "sqs_ack_failed": "SQS acknowledgements that failed (the message comes again)",
    "sqs_errors": "SQS polls that failed",
    "schedule_fired": "jobs made by schedules on their tick",
    "schedule_caught_up": "jobs made by schedules catching up missed ticks",
    "schedule_skipped": "missed schedule ticks skipped (catchup=skip)",
    "schedule_raced": "schedule ticks another worker fired first",
    "schedule_duplicates": "schedule ticks whose job a dead worker had already made",
    "schedule_unplaced": "schedule ticks not fired yet: no node could take the job",
    "schedule_unreadable": "schedule ticks not fired: the schedule could not be read",
}
# What the table lists, and what it does not: a newcomer's service job, running, was not in
# it (the original's registry, POST /services, is the Rust agent's).
SERVICES_NOTE = (
    "The services agents registered (the Rust agent registers those it runs). A job "
    "submitted as a service (--service) is listed with the jobs: the reference agent runs "
    "it without registering it."
)
OUTBOX = "outbox"
OFFERS_MAX = PIECE


def _services_table(blobs: list[bytes], view: View) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("service", "node", "status", "port", "pid", "since"))
    rows = []
    for blob in blobs:
        svc = service_decoder.decode(blob)
        plain = (svc.id, svc.node_id, svc.status, str(svc.port), str(svc.pid))
        cells = [escape(text) for text in plain]
        cells[2] = status_badge(svc.status)
        cells.append(view.when(svc.created_at))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    body = "".join(rows) or '<tr><td colspan="6">no services</td></tr>'
    return (
        f'<p class="muted" id="services-note">{SERVICES_NOTE}</p>'
        f'<div class="scroll"><table id="services"><tr>{head}</tr>{body}</table></div>'
    )


def _drain_cell(node_id: str, by: str | None, token: str, view: View) -> str:
    """Who drained the node, if anyone, and the button that drains or undrains it (posted
    with the page's CSRF token, as the job page's buttons; no token, for a role that may
    not press it: no button)."""
    action = "drain" if by is None else "undrain"
    badge = "" if by is None else f"{status_badge('drained')} by {escape(by)} "
    if not token:
        return badge
    return (
        f'{badge}<form method="post" action="{view.href(f"/ui/nodes/{node_id}/{action}")}">'
        f'<input type="hidden" name="csrf" value="{token}">'
        f'<button id="{action}-{escape(node_id)}">{action.capitalize()}</button></form>'
    )


def offer(node: Node | None) -> tuple[str, str, str]:
    """(cpus, memory, labels) of a node as HTML; "" where the node source says nothing."""
    if node is None:
        return "", "", ""
    cpus = str(node.cpu_count) if node.cpu_count else ""
    memory = f"{node.memory_mb / 1024:.1f} GiB" if node.memory_mb >= 1024 else ""
    memory = memory or (f"{node.memory_mb} MiB" if node.memory_mb else "")
    pairs = sorted(node.labels.items())
    labels = " ".join(f'<code class="label">{escape(k)}={escape(v)}</code>' for k, v in pairs)
    return cpus, memory, labels


async def _offers(request: Request, count: int) -> tuple[dict[str, Node], str]:
    """The node source's nodes, or none and why: a registry that did not answer, or more
    built-in nodes than OFFERS_MAX (`count`: how many the overview found)."""
    if _settings(request).builtin_registry and count > OFFERS_MAX:
        note = (
            f"cpus, memory and labels are shown for at most {OFFERS_MAX} nodes; "
            f"GET /nodes lists them for all {count}"
        )
        return {}, f'<p class="muted" id="offers-note">{note}.</p>'
    try:
        return await _node_source(request).nodes(""), ""
    except RegistryError as exc:
        return {}, f'<p class="error" id="registry-error">{escape(f"registry: {exc}")}</p>'


def _counters(stats: dict[str, int], outbox: int) -> str:
    rows = [
        f'<tr id="counter-{escape(name)}"><th>{escape(COUNTER_WORDS.get(name, name))}'
        f' <code class="muted">{escape(name)}</code></th><td class="num">{value}</td></tr>'
        for name, value in sorted(stats.items())
    ]
    rows.append(
        f'<tr id="counter-{OUTBOX}"><th>job events waiting to be handed to SNS '
        f'<code class="muted">{OUTBOX}</code></th><td class="num">{outbox}</td></tr>'
    )
    return f'<table class="narrow" id="counters">{"".join(rows)}</table>'


async def nodes_page(request: Request) -> Response:
    store, view, settings = _store(request), view_of(request), _settings(request)
    # Sent together on the one connection: one round trip; then what the nodes offer.
    seen_all, services = await asyncio.gather(
        store.run(ops.listings.overview()), store.run(ops.services.services("", "", "key"))
    )
    offers, said = await _offers(request, len(seen_all.queues))
    # The drain buttons' token, for a role that may press them (one route: any node's).
    token = await _csrf(request) if may_post(request, "/ui/nodes/n/drain") else ""
    # A key limited to namespaces sees the fleet it shares, not the deployment's jobs: no
    # node's job list (listed by node, not namespace: GET /jobs), no counts of every job.
    limited = bool(caller(request).namespaces)
    rows = []
    for node_id in sorted(seen_all.queues.keys() | offers.keys()):
        pending, _, slots, besides = seen_all.queues.get(node_id, Queue(0, 0, 0, 0))
        seen = seen_all.last_seen.get(node_id, 0.0)
        health = "healthy" if is_live(seen, view.now, settings.node_ttl_secs) else "unhealthy"
        link = (
            escape(node_id)
            if limited
            else (f'<a href="{view.href("/ui/jobs", node_id=node_id)}">{escape(node_id)}</a>')
        )
        cpus, memory, labels = offer(offers.get(node_id))
        cells = (
            ("", link),
            ("", status_badge(health)),
            ("", view.moment(seen)),
            (' class="num"', cpus),
            (' class="num"', memory),
            (' class="wide"', labels),
            (' class="num"', str(pending)),
            ("", load_bar(slots, settings.max_jobs_per_node, besides)),
            ("", _drain_cell(node_id, seen_all.drained.get(node_id), token, view)),
        )
        rows.append(f'<tr id="node-{escape(node_id)}">{card_cells(NODE_HEADINGS, cells)}</tr>')
    head = "".join(f"<th>{h}</th>" for h in NODE_HEADINGS)
    nodes = "".join(rows) or f'<tr><td colspan="{len(NODE_HEADINGS)}">no nodes</td></tr>'
    counts = "".join(
        f'<tr><th><a href="{view.href("/ui/jobs", status=s)}">{s}</a></th>'
        f'<td class="num">{grouped(seen_all.by_status.get(s, 0))}</td></tr>'
        for s in STATUSES
    )
    body = (
        f'{said}<div class="scroll"><table class="cards" id="nodes"><tr>{head}</tr>{nodes}'
        f"</table></div><h2>Services</h2>{_services_table(services, view)}"
    )
    if not limited:
        body += (
            f'<h2>Jobs by status</h2><table class="narrow" id="by-status">{counts}</table>'
            "<h2>Background work</h2>"
            '<p class="muted">What the workers have done, counted in Redis (also on /metrics '
            "as <code>scheduler_worker_events_total</code>).</p>"
            + _counters(seen_all.stats, seen_all.outbox)
        )
    return page(request, "Nodes", body, refresh=True, view=view)

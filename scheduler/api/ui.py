"""The web UI at /ui: the jobs (newest first, filtered by status and node, paged), a job's
page with its output, and the nodes with their queues and the background counters.

Server-rendered HTML: no script, no build step, nothing from a CDN; list pages refresh
themselves. With TINYAWS_API_KEY set it sits behind the key: the login form sets a cookie
holding an HMAC of the key (never the key itself), HttpOnly and SameSite=Strict, and every
form that changes something carries a CSRF token derived from the key too.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable
from html import escape
from typing import Any
from urllib.parse import urlencode

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from scheduler.api import retries
from scheduler.api.http import UI_COOKIE, HTTPError, ui_secret, whole_number
from scheduler.api.params import param
from scheduler.api.state import settings as _settings
from scheduler.api.state import store as _store
from scheduler.api.ui_attempts import attempts_section
from scheduler.api.ui_dead import MAX_IDS, notice, retry_form
from scheduler.api.ui_forms import checked_form, form_lists
from scheduler.api.ui_forms import csrf as _csrf
from scheduler.models.fields import JobField, Kind
from scheduler.models.job import (
    FINAL_STATUSES,
    JOB_FIELDS,
    MAX_JOB_NUMBER,
    NOT_STARTED,
    STATUSES,
    Job,
    job_decoder,
    job_number,
)
from scheduler.models.registry import Service
from scheduler.models.wire import ID_RE, rfc3339
from scheduler.nodes.placement import is_live
from scheduler.store.errors import JobNotFound

PAGE_SIZE = MAX_IDS  # 50: the failed list retries at most one page at once
service_decoder = msgspec.json.Decoder(Service)
REFRESH_SECS = 5

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}
header form{margin-left:auto}
main{padding:16px}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eaeef2}
pre{background:#fff;border:1px solid #d0d7de;padding:8px;overflow:auto;max-height:40em}
.st{padding:1px 6px;border-radius:8px;background:#eaeef2}
.pending{background:#fff8c5}.delayed,.waiting{background:#fbefff}.running{background:#ddf4ff}.done{background:#dafbe1}
.failed,.unhealthy{background:#ffebe9}.healthy{background:#dafbe1}
.paused{background:#fff1e5}.active{background:#dafbe1}
.reason{background:#fff}.cancelled{text-decoration:line-through}.cancelling{background:#fff1e5}
form.filters{margin-bottom:12px;display:flex;gap:8px;align-items:center}
nav.pages{margin-top:12px;display:flex;gap:16px}
.muted{color:#57606a}
.notice{background:#ddf4ff;border:1px solid #54aeff;padding:8px}
table.narrow{width:auto;min-width:20em}
"""


def page(request: Request, title: str, body: str, *, refresh: bool = False) -> HTMLResponse:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECS}">' if refresh else ""
    logout = ""
    if _settings(request).api_key:
        logout = '<form method="post" action="/ui/logout"><button>Log out</button></form>'
    html = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
        f"<title>{escape(title)} · scheduler</title><style>{STYLE}</style></head><body>"
        f'<header><a href="/ui/jobs">Jobs</a><a href="/ui/nodes">Nodes</a>'
        f'<a href="/ui/schedules">Schedules</a>{logout}</header>'
        f"<main><h1>{escape(title)}</h1>{body}</main></body></html>"
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def status_badge(status: str) -> str:
    return f'<span class="st {escape(status)}">{escape(status)}</span>'


def job_status(job: Job) -> str:
    """The status badge, and why the scheduler failed the job if it did (`failed
    cancelled`): the wire status stays done or failed for the original clients."""
    if not job.failure_reason:
        return status_badge(job.status)
    reason = escape(job.failure_reason)
    return f'{status_badge(job.status)} <span class="st reason {reason}">{reason}</span>'


def _filters(request: Request) -> tuple[str, str, int]:
    status, node_id = param(request, "status"), param(request, "node_id")
    raw_before = param(request, "before")
    before = whole_number(raw_before, MAX_JOB_NUMBER)
    if status and status not in STATUSES:
        raise HTTPError(400, f"invalid status: use one of {', '.join(STATUSES)}")
    if node_id and not ID_RE.fullmatch(node_id):
        raise HTTPError(400, "invalid node_id: use 1 to 128 of A-Z a-z 0-9 . _ -")
    if raw_before and before is None:
        raise HTTPError(400, "invalid before: use a job number")
    return status, node_id, before or 0


def _filter_form(status: str, node_id: str) -> str:
    options = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s or "any status"}</option>'
        for s in ("", *STATUSES)
    )
    return (
        '<form class="filters" method="get" action="/ui/jobs">'
        f'<select name="status" id="status">{options}</select>'
        f'<input name="node_id" id="node_id" placeholder="node id" value="{escape(node_id)}">'
        '<button id="filter">Filter</button></form>'
    )


def _job_row(job: Job) -> str:
    link = f'<a href="/ui/jobs/{escape(job.job_id)}">{escape(job.job_id)}</a>'
    command = job.command or job.deploy_url
    short = command if len(command) <= 80 else command[:79] + "…"
    cells = (
        link,
        escape(job.node_id),
        job_status(job),
        f"<code>{escape(short)}</code>",
        escape(job.created_at),
        escape(job.finished_at or ""),
    )
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


async def jobs_page(request: Request) -> Response:
    status, node_id, before = _filters(request)
    blobs = await _store(request).list(node_id, status, before, PAGE_SIZE + 1, newest=True)
    jobs = [job_decoder.decode(blob) for blob in blobs]
    shown = jobs[:PAGE_SIZE]
    head = "".join(
        f"<th>{h}</th>" for h in ("job", "node", "status", "command", "created", "finished")
    )
    rows = "".join(_job_row(job) for job in shown) or '<tr><td colspan="6">no jobs</td></tr>'
    links = []
    kept = {k: v for k, v in (("status", status), ("node_id", node_id)) if v}
    if before:
        links.append(f'<a id="newest" href="/ui/jobs?{urlencode(kept)}">Newest</a>')
    if len(jobs) > PAGE_SIZE:
        older = urlencode({**kept, "before": job_number(shown[-1].job_id) or 0})
        links.append(f'<a id="older" href="/ui/jobs?{older}">Older</a>')
    dead = retry_form(shown, _csrf(request), node_id) if status == "failed" else ""
    body = (
        notice(request)
        + _filter_form(status, node_id)
        + dead
        + f'<table id="jobs"><tr>{head}</tr>{rows}</table>'
        + f'<nav class="pages">{"".join(links)}</nav>'
    )
    return page(request, "Jobs", body, refresh=not before)


def _names_only(mapping: dict[str, str]) -> str:
    # Names only: values are often secrets (env_vars), and a screen is easy to look over.
    names = ", ".join(f"<code>{escape(name)}</code>" for name in sorted(mapping))
    return f'{names} <span class="muted">(values hidden)</span>' if mapping else ""


# How a field's value shows, where it is not its plain text; the rest of the page's layout:
# status comes right after job_id (what a look at the page is for), the outputs go below.
_SHOWN_AS: dict[str, Callable[[Any], str]] = {
    "status": status_badge,
    "node_id": lambda node: f'<a href="/ui/jobs?node_id={escape(node)}">{escape(node)}</a>',
    "command": lambda command: f"<code>{escape(command)}</code>",
    "job_type": lambda job_type: escape(job_type or "run"),
}
_FIRST = ("job_id", "status", "failure_reason")
_BELOW = ("stdout", "stderr")
_ROWS = sorted(
    (f for f in JOB_FIELDS if f.name not in _BELOW),
    key=lambda f: _FIRST.index(f.name) if f.name in _FIRST else len(_FIRST),
)


def _cell(field: JobField, value: Any) -> str:
    if field.name in _SHOWN_AS:
        return _SHOWN_AS[field.name](value)
    if field.kind is Kind.OBJECT:  # env_vars, and any map a later field holds
        return _names_only(value or {})
    if field.kind is Kind.LIST:  # the ids a job waits for
        return ", ".join(f'<a href="/ui/jobs/{escape(v)}">{escape(v)}</a>' for v in value or [])
    if not field.required and value == field.empty:
        return ""  # what the API leaves out
    return escape(value if isinstance(value, str) else msgspec.json.encode(value).decode())


def _job_fields(job: Job) -> list[tuple[str, str]]:
    """(field, cell HTML) of every field of Job, with a row even when empty."""
    return [(f.name, _cell(f, getattr(job, f.name))) for f in _ROWS]


async def job_page(request: Request) -> Response:
    job_id: str = request.path_params["job_id"]
    if not ID_RE.fullmatch(job_id):
        raise HTTPError(404, "job not found")
    store = _store(request)
    # Sent together on the one connection: one round trip.
    found = await asyncio.gather(store.get(job_id), store.attempts(job_id), return_exceptions=True)
    for failed in found:  # the attempts raise JobNotFound without the job: the 404 below
        if isinstance(failed, BaseException) and not isinstance(failed, JobNotFound):
            raise failed
    blob, attempts = found
    if not isinstance(blob, bytes) or not isinstance(attempts, list):
        raise HTTPError(404, "job not found")
    job = job_decoder.decode(blob)
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in _job_fields(job))
    body = f'<table id="job">{rows}</table>'
    action = _ACTIONS.get(job.status)
    if action is not None:
        body += (
            f'<form method="post" action="/ui/jobs/{escape(job.job_id)}/{action}">'
            f'<input type="hidden" name="csrf" value="{_csrf(request)}">'
            f'<button id="{action}">{action.capitalize()} this job</button></form>'
        )
    body += attempts_section(attempts)
    for name in _BELOW:
        body += f'<h2>{name}</h2><pre id="{name}">{escape(getattr(job, name))}</pre>'
    return page(request, job.job_id, body, refresh=job.status not in FINAL_STATUSES)


# The job page's button: what a job in each status offers (posted with the form's token).
_ACTIONS = dict.fromkeys((*NOT_STARTED, "running"), "cancel") | {"failed": "retry"}


async def _posted_job_id(request: Request) -> str:
    """The job of a button's POST, once its form's token is checked."""
    job_id: str = request.path_params["job_id"]
    if not ID_RE.fullmatch(job_id):
        raise HTTPError(404, "job not found")
    await checked_form(request)
    return job_id


async def cancel(request: Request) -> Response:
    """The job page's cancel button: DELETE /jobs/{id}, then back to the job."""
    job_id = await _posted_job_id(request)
    await _store(request).cancel(job_id, time.time())
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303)


async def retry(request: Request) -> Response:
    """The job page's retry button: POST /jobs/{id}/retry, then back to the job."""
    job_id = await _posted_job_id(request)
    await retries.retry_one(request, job_id)
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303)


def _ago(seen: float, now: float) -> str:
    if not seen:
        return ""
    return f'{escape(rfc3339(seen))} <span class="muted">({max(0, now - seen):.0f} s ago)</span>'


def _services_table(blobs: list[bytes]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("service", "node", "status", "port", "pid", "since"))
    rows = []
    for blob in blobs:
        svc = service_decoder.decode(blob)
        plain = (svc.id, svc.node_id, svc.status, str(svc.port), str(svc.pid), svc.created_at)
        cells = [escape(text) for text in plain]
        cells[2] = status_badge(svc.status)
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    body = "".join(rows) or '<tr><td colspan="6">no services</td></tr>'
    return f'<table id="services"><tr>{head}</tr>{body}</table>'


async def nodes_page(request: Request) -> Response:
    store = _store(request)
    # Sent together on the one connection: one round trip.
    view, services = await asyncio.gather(store.overview(), store.services("", "", "key"))
    now = time.time()
    ttl = _settings(request).node_ttl_secs
    rows = []
    for node_id in sorted(view.queues):
        pending, running = view.queues[node_id]
        seen = view.last_seen.get(node_id, 0.0)
        health = "healthy" if is_live(seen, now, ttl) else "unhealthy"
        link = f'<a href="/ui/jobs?node_id={escape(node_id)}">{escape(node_id)}</a>'
        cells = (link, status_badge(health), _ago(seen, now), str(pending), str(running))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>" for h in ("node", "health", "last heartbeat", "pending", "running")
    )
    nodes = "".join(rows) or '<tr><td colspan="5">no nodes</td></tr>'
    counts = "".join(
        f'<tr><th><a href="/ui/jobs?status={s}">{s}</a></th><td>{view.by_status.get(s, 0)}</td>'
        "</tr>"
        for s in STATUSES
    )
    stats = {**view.stats, "outbox (events not yet handed to SNS)": view.outbox}
    counters = "".join(
        f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in sorted(stats.items())
    )
    body = (
        f'<table id="nodes"><tr>{head}</tr>{nodes}</table>'
        f"<h2>Services</h2>{_services_table(services)}"
        f'<h2>Jobs by status</h2><table class="narrow" id="by-status">{counts}</table>'
        f'<h2>Background work</h2><table class="narrow" id="counters">{counters}</table>'
    )
    return page(request, "Nodes", body, refresh=True)


async def login_page(request: Request) -> Response:
    error = '<p class="failed">wrong key</p>' if request.method == "POST" else ""
    form = (
        f'{error}<form method="post" action="/ui/login">'
        '<input type="password" name="key" id="key" placeholder="TINYAWS_API_KEY" autofocus>'
        '<button id="login">Log in</button></form>'
    )
    return page(request, "Log in", form)


async def login(request: Request) -> Response:
    settings = _settings(request)
    form = await _form(request)
    key = form.get("key", "")
    if not settings.api_key or not hmac.compare_digest(key.encode(), settings.api_key.encode()):
        response = await login_page(request)
        response.status_code = 401
        return response
    response = RedirectResponse("/ui/jobs", status_code=303)
    response.set_cookie(
        UI_COOKIE, ui_secret(settings.api_key, "session"), httponly=True, samesite="strict"
    )
    return response


async def logout(request: Request) -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(UI_COOKIE)
    return response


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded form (4 KiB at most: a key, a token): each name's first value."""
    return {name: values[0] for name, values in (await form_lists(request)).items()}


async def home(request: Request) -> Response:
    return RedirectResponse("/ui/jobs", status_code=302)

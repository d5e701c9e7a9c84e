"""The web UI's job page (/ui/jobs/{id}), laid out to answer "what happened?" first: what
it runs (its command, under its id: a phone need not scroll past its output for it), the
summary (status as people say it, a cancel reading cancelled; why, in words; exit code; how
long it ran; node; attempt; times) and its button; while it is unfinished, its live output
(ui_live.py); then its output, once (`output_section`: the error first, the end of each
stream in view); then its attempts (which link to that output rather than repeat it); then
what was asked (the submitted fields that are set, with words for names).

Every field of Job shows somewhere, once: the command (`command_block`), the summary's
(`SUMMARY`), the output (`OUTPUT`), and every other one in the request table when it is
set, so a field added to Job later shows without a change here. Every value is escaped; a
map's values (env_vars) are never shown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from html import escape
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.http import HTTPError, caller
from scheduler.api.state import settings as _settings
from scheduler.api.state import store as _store
from scheduler.api.ui_attempts import attempts_section
from scheduler.api.ui_charts import grouped
from scheduler.api.ui_forms import csrf as _csrf
from scheduler.api.ui_forms import may_post
from scheduler.api.ui_layout import (
    View,
    duration,
    names_only,
    page,
    shown_status,
    status_badge,
    view_of,
)
from scheduler.api.ui_live import SCRIPT, live_section
from scheduler.models import unplaced
from scheduler.models.endings import FAILURE_WORDS
from scheduler.models.fields import JobField, Kind
from scheduler.models.job import (
    FINAL_STATUSES,
    JOB_FIELDS,
    NOT_STARTED,
    Job,
    attempt_of,
    job_decoder,
    seen_by,
)
from scheduler.models.labels import selector_text
from scheduler.models.queue_place import NOWHERE, QueuePlace, in_words
from scheduler.models.wire import ID_RE, parse_rfc3339
from scheduler.store import ops
from scheduler.store.errors import JobNotFound

# The record's head and the output, shown by the summary and the output sections.
SUMMARY = (
    "job_id", "node_id", "status", "retry_count", "earlier_attempts", "exit_code", "created_at",
    "running_at", "finished_at", "failure_reason", "pending_reason", "schedule", "taken_from",
    "cancelled_by",
)  # fmt: skip
OUTPUT = ("stdout", "stderr")
HEAD = ("command",)  # shown under the page's heading (`command_block`)
# An unfinished job's record holds the output its last ended attempt reported (a retry's
# earlier one); the attempt running now reports its own only as it ends.
OUTPUT_WHEN = "Its last ended attempt's: the attempt after it shows live above as it runs."
# The end of each output shown in view (an error is at its end): as many lines as a screen's
# top holds; the lines before it folded above it.
TAIL_LINES = 15
TAIL_CHARS = 3000
# Names in words where the field's own name does not read as one.
LABELS = {
    "instance_id": "instance",
    "deploy_url": "deploy URL",
    "env_vars": "environment",
    "job_type": "type",
    "run_at": "due at",
    "max_retries": "retries allowed",
    "retry_backoff_secs": "retry backoff (s)",
    "after": "runs after",
    "memory_mb": "memory (MB)",
    "node_selector": "node selector",
}


def label(field: JobField) -> str:
    return LABELS.get(field.name, field.name.replace("_", " "))


_SHOWN_AS: dict[str, Callable[[Any], str]] = {
    "job_type": lambda job_type: escape(job_type or "run"),
}


def _cell(field: JobField, value: Any, view: View | None = None) -> str:
    """A field's value as HTML ("" for an unset one: its row is left out)."""
    view = view or View(paused=False, now=time.time())
    if field.name in _SHOWN_AS:
        return _SHOWN_AS[field.name](value)
    if field.kind is Kind.OBJECT:  # env_vars, and any map a later field holds
        return names_only(value or {})
    if field.kind is Kind.SELECTOR:  # node_selector: zone=a|b, node.id=n1
        return escape(selector_text(value or {}))
    if field.kind is Kind.LIST:  # the ids a job waits for
        return ", ".join(
            f'<a href="{view.href(f"/ui/jobs/{v}")}">{escape(v)}</a>' for v in value or []
        )
    if field.kind is Kind.TIMESTAMP:
        return view.when(value)
    if not field.required and value == field.empty:
        return ""  # what the API leaves out
    return escape(value if isinstance(value, str) else msgspec.json.encode(value).decode())


def _said(words: str, code: str) -> str:
    """`words`, with the record's own code on hover (what the API and the jobs list say)."""
    return f'<span class="why" title="{escape(code)}">{escape(words)}</span>'


def _due(job: Job, view: View) -> str:
    """When a delayed job is due, in words and as a time of day (the date too past today):
    "due in 16 s, at 12:00:16 UTC"."""
    try:
        at = parse_rfc3339(job.run_at or "")
    except ValueError:
        return "not due yet"
    day = "%H:%M:%S UTC" if int(at // 86400) == int(view.now // 86400) else "%Y-%m-%d %H:%M:%S UTC"
    clock = time.strftime(day, time.gmtime(at))
    if at <= view.now:  # the worker makes it pending within PROMOTE_INTERVAL_SECS
        return f"due since {clock}: it is queued any moment"
    return f"due {view.moment(at, job.run_at or '')}, at {clock}"


def reason(job: Job, view: View) -> str:
    """Why the job is where it is, in words, once ("" when its status says it all): the
    status row above shows the status alone; a delayed job's, when it is due."""
    if job.failure_reason:
        words = FAILURE_WORDS.get(job.failure_reason, job.failure_reason)
        if job.failure_reason == "cancelled" and job.cancelled_by:
            words += f" by {job.cancelled_by}"
        return _said(words, job.failure_reason)
    if job.pending_reason:
        words = unplaced.why_of(job)
        return _said(words, job.pending_reason)
    if job.status == "cancelling":
        by = f" by {job.cancelled_by}" if job.cancelled_by else ""
        return escape(f"cancel requested{by}: its node is stopping it")
    if job.status == "failed":
        said = f"exited with code {job.exit_code}" if job.exit_code is not None else "failed"
        return f"the command {said}"
    if job.status == "pending" and job.taken_from:
        return "waited in the queue of a node with no room for it; an idle node took it"
    if job.status == "waiting":
        return "runs once every job it runs after is done"
    if job.status == "delayed":
        return _due(job, view)
    return ""


def _attempt(job: Job, allowed: int) -> tuple[str, str]:
    """(label, text): while more may come (an unfinished job) its attempt's number, of how
    many its retries allow; once ended (or being cancelled) how many it made ("of 2" on a
    done job read as if a second one were coming)."""
    number = attempt_of(job)
    if job.status in FINAL_STATUSES or job.status == "cancelling":
        never = number == 1 and job.running_at is None  # cancelled, or a dependency failed
        return "attempts", "none ran" if never else str(number)
    # its retries start over at a retry by hand, its numbering does not
    limit = job.earlier_attempts + (job.max_retries if job.max_retries is not None else allowed) + 1
    return "attempt", f"{number} of {limit}" if number <= limit else str(number)


def _schedule(job: Job, view: View) -> str:
    """The schedule that made the job, a link to the schedules ("" for any other job)."""
    if not job.schedule:
        return ""
    href = view.href("/ui/schedules") + f"#row-{escape(job.schedule)}"
    return f'schedule <a id="schedule" href="{href}">{escape(job.schedule)}</a>'


def _node_link(node_id: str, view: View) -> str:
    return f'<a href="{view.href("/ui/jobs", node_id=node_id)}">{escape(node_id)}</a>'


def summary_rows(
    job: Job, view: View, allowed_retries: int, place: QueuePlace = NOWHERE
) -> list[tuple[str, str]]:
    """(label, HTML) of what happened, the empty ones left out."""
    node = _node_link(job.node_id, view) if job.node_id else '<span class="muted">none yet</span>'
    if job.taken_from:  # work stealing (docs/GUIDE.md): where it waited, and why it left
        node += (
            f' <span class="muted">taken from the queue of {_node_link(job.taken_from, view)},'
            " where it waited while this node was idle</span>"
        )
    exit_code = "" if job.exit_code is None else str(job.exit_code)
    rows = [
        ("status", status_badge(shown_status(job))),  # why: the reason row's, in words
        ("reason", reason(job, view)),
        ("exit code", escape(exit_code)),
        ("ran for", escape(duration(job, view.now))),
        ("node", node),
        (
            "in queue",
            in_words(place, job.node_id, job.pending_reason, lambda n: _node_link(n, view)),
        ),
        ("made by", _schedule(job, view)),
        _attempt(job, allowed_retries),
        ("submitted", view.when(job.created_at)),
        ("started", view.when(job.running_at)),
        ("finished", view.when(job.finished_at)),
    ]
    return [(name, html) for name, html in rows if html]


def due_matters(job: Job, ended: int) -> bool:
    """Whether the job's run_at is a due time to show in the request: the delay its submit
    asked for, once it is no longer delayed (while it is, its reason above says when:
    `reason`). The record keeps run_at for the dashboard's wait too: set when a dependency
    released it or a retry by hand started it over (models/job.py), which no one asked for.
    `ended`: its attempts that ended (a retry by hand keeps the earlier ones: more than its
    own)."""
    if job.run_at is None or job.status == "delayed":
        return False
    own = 1 if job.status in FINAL_STATUSES else 0  # the attempt its ending recorded
    return not job.after and not job.retry_count and not job.retried_by and ended <= own


def request_rows(job: Job, view: View, ended: int = 0) -> list[tuple[str, str]]:
    """(label, HTML) of every other field that is set: what was asked for (`ended`: its
    attempts that ended, for `due_matters`)."""
    rows = []
    for field in JOB_FIELDS:
        if field.name in SUMMARY or field.name in OUTPUT or field.name in HEAD:
            continue
        if field.name == "run_at" and not due_matters(job, ended):
            continue
        html = _cell(field, getattr(job, field.name), view)
        if html:
            rows.append((label(field), html))
    return rows


def command_block(job: Job) -> str:
    """What the job runs, whole and escaped, wrapped to the page's width ("" for a deploy
    job, which runs none: its deploy URL is in the request)."""
    if not job.command:
        return ""
    return f'<pre id="command" class="command" title="its command">{escape(job.command)}</pre>'


def split_tail(text: str) -> tuple[str, str]:
    """`text` as (head, tail), head + tail == text: the tail its last TAIL_LINES lines (at
    most TAIL_CHARS characters, a final newline aside), the head what comes before."""
    body = text.rstrip("\n")
    lines = body.split("\n")
    start = len(body) - len("\n".join(lines[-TAIL_LINES:]))
    start = max(start, len(body) - TAIL_CHARS, 0)
    return text[:start], text[start:]


def _table(table_id: str, rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{name}</th><td>{html}</td></tr>" for name, html in rows)
    return f'<div class="scroll"><table class="fields" id="{table_id}">{body}</table></div>'


def _stream(name: str, text: str) -> str:
    """One output, each byte once: its end in view (where an error is), the lines before
    it folded just above (a <details>: no script), so reading it whole is one click."""
    head, tail = split_tail(text)
    folded = ""
    if head:
        count = head.count("\n") + (not head.endswith("\n"))
        folded = (
            f'<details class="head" id="{name}-head">'
            f"<summary>{grouped(count)} earlier line(s)</summary>"
            f'<pre class="{name}">{escape(head)}</pre></details>'
        )
    return f'<h3>{name}</h3>{folded}<pre id="{name}" class="{name}">{escape(tail)}</pre>'


def output_section(job: Job) -> str:
    """The job's output (stdout, stderr), in one place: the error output first when the job
    failed. An ended job says which is empty. An unfinished one shows only what its last
    ended attempt reported, saying so ("" when none did): its running attempt's output is
    not in the record until that attempt ends (its live output shows it meanwhile)."""
    final = job.status in FINAL_STATUSES
    order = ("stderr", "stdout") if job.status == "failed" else OUTPUT
    parts = []
    for name in order:
        text = getattr(job, name)
        if text:
            parts.append(_stream(name, text))
        elif final:
            parts.append(f'<p class="muted" id="{name}-empty">{name}: empty</p>')
    if not final and parts:
        parts.insert(0, f'<p class="muted" id="output-when">{OUTPUT_WHEN}</p>')
    if not parts:
        return ""
    return f'<section id="output"><h2>Output</h2>{"".join(parts)}</section>'


# The job page's button: what a job in each status offers (posted with the form's token).
ACTIONS = dict.fromkeys((*NOT_STARTED, "running"), "cancel") | {"failed": "retry"}


def _button(job: Job, action: str, posted: str, view: View, token: str) -> str:
    """The job's button posting `action` to `posted`, its form carrying the page's CSRF
    token. A cancel cannot be undone (a running job is killed): its button is behind a
    question first, a <details> the reader opens (the page's refresh waits while it is
    open: ui_refresh.py); "Keep it" is the page again, the question closed."""
    said = f"Cancel {job.job_id}" if action == "cancel" else f"{action.capitalize()} this job"
    form = (
        f'<form method="post" action="{view.href(posted)}">'
        f'<input type="hidden" name="csrf" value="{token}">'
        f'<button id="{action}">{escape(said)}</button></form>'
    )
    if action != "cancel":
        return form
    stops = "Its command is stopped. " if job.status == "running" else ""
    keep = view.href(f"/ui/jobs/{job.job_id}")
    return (
        '<details class="confirm" id="cancel-confirm">'
        '<summary id="cancel-ask">Cancel this job…</summary>'
        f"<p>Cancel {escape(job.job_id)}? {stops}There is no undo: a retry starts it over.</p>"
        f'<div class="choices">{form}<a id="keep" href="{keep}">Keep it</a></div></details>'
    )


async def job_page(request: Request) -> Response:
    job_id: str = request.path_params["job_id"]
    if not ID_RE.fullmatch(job_id):
        raise HTTPError(404, "job not found")
    view, by = view_of(request), caller(request)
    store = _store(request)
    # Sent together on the one connection: one round trip.
    found = await asyncio.gather(
        store.run(ops.jobs.get(job_id)),
        store.run(ops.jobs.attempts(job_id, by.scope)),
        store.run(ops.jobs.queue_place(job_id, by.scope)),
        return_exceptions=True,
    )
    for failed in found:  # the attempts raise JobNotFound without the job: the 404 below
        if isinstance(failed, BaseException) and not isinstance(failed, JobNotFound):
            raise failed
    blob, attempts, place = found
    # Another namespace's job (its attempts not found either) is one that does not exist.
    if not isinstance(blob, bytes) or not isinstance(attempts, list) or not seen_by(by, blob):
        raise HTTPError(404, "job not found")
    job = job_decoder.decode(blob)
    settings = _settings(request)
    queued = place if isinstance(place, QueuePlace) else NOWHERE
    body = command_block(job)
    body += _table("summary", summary_rows(job, view, settings.max_job_retries, queued))
    action = ACTIONS.get(job.status)
    posted = f"/ui/jobs/{job.job_id}/{action}"
    if action is not None and may_post(request, posted):  # a reader's page offers neither
        body += _button(job, action, posted, view, await _csrf(request))
    live = live_section(job, view, settings.log_max_bytes)
    body += live + output_section(job)
    body += attempts_section(attempts, view, own=(job.stdout, job.stderr))
    body += f"<h2>Request</h2>{_table('request', request_rows(job, view, len(attempts)))}"
    unfinished = job.status not in FINAL_STATUSES
    script = SCRIPT if live else ""  # the live output's: it reloads the page (ui_live.py)
    return page(request, job.job_id, body, refresh=unfinished, view=view, script=script)

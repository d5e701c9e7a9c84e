"""The dead set in the web UI: /ui/jobs?status=failed offers to retry the failed jobs it
shows in one go, the cancelled ones left alone (stopped on purpose, as the CLI's `retry
--failed` leaves them). The form (the page's job ids, its CSRF token) posts to /ui/jobs/retry,
which retries them in one Redis call as POST /jobs/retry does and goes back to the failed
list, saying how many were retried and how many could not be."""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import Annotated
from urllib.parse import urlencode

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from scheduler.api import retries
from scheduler.api.http import HTTPError, whole_number
from scheduler.api.params import query_of
from scheduler.api.ui_forms import FORM_BYTES, Button, checked_form
from scheduler.api.ui_layout import REFRESH, View, view_of
from scheduler.models.job import Job, cancelled_on_purpose
from scheduler.models.wire import check_id
from scheduler.store.scripts import codes

MAX_IDS = 50  # one page of the jobs list (ui_jobs.PAGE_SIZE)
# The page's ids at their longest, beside the token and the node filter.
BODY_BYTES = FORM_BYTES + MAX_IDS * len("&job_id=" + "x" * 128)


class RetryForm(Button, kw_only=True):
    """The failed list's form, as its route is described (routes.TABLE, openapi.py): the
    page's token, its job ids (`job_id`, repeated) and its node filter."""

    job_id: Annotated[list[str], msgspec.Meta(min_length=1, max_length=MAX_IDS)]
    node_id: str = ""


# What the failed list says on its way back: (query parameter, sentence).
NOTICES = (
    ("retried", "Retried {} failed job(s)."),
    ("skipped", "{} not retried: no longer failed, or gone."),
    ("unplaced", "{} not retried: no healthy compute node to run on."),
    ("blocked", "{} not retried: a job it runs after is failed (retry that one too)."),
    ("crowded", "{} not retried: a job it runs after has too many jobs waiting for it."),
)


def retry_form(shown: list[Job], token: str, node_id: str, view: View) -> str:
    """The failed list's button: retry the jobs this page shows but the cancelled ones (none
    left: no button)."""
    jobs = [job for job in shown if not cancelled_on_purpose(job)]
    if not jobs:
        return ""
    ids = "".join(
        f'<input type="hidden" name="job_id" value="{escape(job.job_id)}">' for job in jobs
    )
    if node_id:
        ids += f'<input type="hidden" name="node_id" value="{escape(node_id)}">'
    noun = "job" if len(jobs) == 1 else "jobs"
    left = len(shown) - len(jobs)
    aside = f" ({left} cancelled left alone: retry each from its page)" if left else ""
    return (
        f'<form class="filters" method="post" action="{view.href("/ui/jobs/retry")}">'
        f'<input type="hidden" name="csrf" value="{escape(token)}">{ids}'
        f'<button id="retry-failed">Retry these {len(jobs)} failed {noun}</button>'
        f"{escape(aside)}</form>"
    )


def notice(request: Request) -> str:
    """What the bulk retry did, from its redirect's query (whole numbers only, else 400)."""
    said = []
    query = query_of(request)
    for name, sentence in NOTICES:
        if not query.given(name):
            continue
        count = whole_number(query.get(name), MAX_IDS)
        if count is None:
            raise HTTPError(400, f"invalid {name}: use a whole number")
        said.append(escape(sentence.format(count)))
    return f'<p class="notice" id="notice">{" ".join(said)}</p>' if said else ""


async def retry_failed(request: Request) -> Response:
    """POST /ui/jobs/retry: retry the posted jobs (1 to MAX_IDS ids, the page's token), then
    back to the failed list (303). Bad ids are a 400 and nothing is retried."""
    paused = view_of(request).paused  # checked before anything changes
    form = await checked_form(request, BODY_BYTES)
    job_ids = form.get("job_id", [])
    node_id = (form.get("node_id") or [""])[0]
    retries.check_job_ids("job_id", job_ids, MAX_IDS)
    if node_id:
        check_id("node_id", node_id)
    done = Counter(r.code for r in await retries.retry_ids(request, job_ids))
    query: dict[str, str | int] = {"status": "failed"}
    if node_id:
        query["node_id"] = node_id
    query["retried"] = done[codes.OK]
    counts = {"skipped": done[codes.NOT_FOUND] + done[codes.NOT_FAILED]}
    counts["unplaced"] = done[codes.NO_NODES]
    counts["blocked"] = done[codes.BLOCKED]
    counts["crowded"] = done[codes.TOO_MANY]
    query.update((name, count) for name, count in counts.items() if count)
    if paused:
        query[REFRESH] = "off"
    return RedirectResponse(f"/ui/jobs?{urlencode(query)}", status_code=303)

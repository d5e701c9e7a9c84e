"""The web UI's schedules page (/ui/schedules): every schedule by name (paged), when it runs,
its next run, its last job and a link to all it made, and a pause or resume button carrying
the UI's CSRF token. The job template's env_vars show by name only, as on a job's page."""

from __future__ import annotations

import time
from html import escape

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from scheduler.api.http import NOT_FOUND_PAGE, HTTPError, caller
from scheduler.api.params import param
from scheduler.api.schedules import seen_page
from scheduler.api.state import store as _store
from scheduler.api.ui_forms import checked_form, may_post
from scheduler.api.ui_forms import csrf as _csrf
from scheduler.api.ui_layout import View, card_cells, names_only, status_badge, view_of
from scheduler.api.ui_layout import page as ui_page
from scheduler.models.schedule import CATCHUP, Schedule, paused, resumed
from scheduler.models.wire import ID_RE
from scheduler.store import ops

PAGE_SIZE = 100
# "if runs are missed": the column is a policy, its `catchup` (the API's field, the CLI's
# --catchup), not a count of runs that were missed.
HEADINGS = ("schedule", "runs", "if runs are missed", "state", "next run", "last run", "job", "")
# A schedule's catchup (models/schedule.py CATCHUP) in words, and on hover what it does with
# the runs it missed (its workers down, or no healthy node, past SCHEDULE_GRACE_SECS).
CATCHUP_WORDS = {
    "skip": (
        "skip them",
        "Runs it missed are skipped: it goes on with its next one (catchup skip)",
    ),
    "once": ("run once", "Runs it missed make one job for all of them (catchup once)"),
}
if set(CATCHUP_WORDS) != set(CATCHUP):
    raise TypeError("api/ui_schedules.py CATCHUP_WORDS needs words for each of models CATCHUP")


def _catchup(schedule: Schedule) -> str:
    words, said = CATCHUP_WORDS.get(schedule.catchup, (schedule.catchup, ""))
    title = f' title="{escape(said)}"' if said else ""
    return f'<span class="catchup"{title}>{escape(words)}</span>'


def _when(schedule: Schedule) -> str:
    if schedule.cron:
        return f"<code>{escape(schedule.cron)}</code> {escape(schedule.timezone)}"
    return f"every {schedule.every_secs} s"


def _button(schedule: Schedule, token: str, view: View) -> str:
    """Pause or Resume, posted with the page's token (none, for a role that may not press
    it: no button)."""
    if not token:
        return ""
    action = "resume" if schedule.paused else "pause"
    name = escape(schedule.name)
    return (
        f'<form method="post" action="{view.href(f"/ui/schedules/{schedule.name}/{action}")}">'
        f'<input type="hidden" name="csrf" value="{token}">'
        f'<button id="{action}-{name}">{action.capitalize()}</button></form>'
    )


def _row(schedule: Schedule, token: str, view: View) -> str:
    job = schedule.job
    command = str(job.get("command") or job.get("deploy_url") or "")
    short = command if len(command) <= 60 else command[:59] + "…"
    template = f"<code>{escape(short)}</code> {names_only(job.get('env_vars') or {})}"
    last = ""
    if schedule.last_job_id:
        last_id = escape(schedule.last_job_id)
        href = view.href(f"/ui/jobs/{schedule.last_job_id}")
        last = f'<a href="{href}">{last_id}</a> {view.when(schedule.last_run_at)}'
    # Every job it made, the deleted one's of the same name too (GET /jobs?schedule=).
    every = view.href("/ui/jobs", schedule=schedule.name)
    last += f' <a id="jobs-{escape(schedule.name)}" href="{every}">all its jobs</a>'
    cells = (
        ("", f'<span id="name-{escape(schedule.name)}">{escape(schedule.name)}</span>'),
        ("", _when(schedule)),
        ("", _catchup(schedule)),
        ("", status_badge("paused" if schedule.paused else "active")),
        ("", view.moment(schedule.next_tick)),
        ("", last),
        (' class="wide"', template),
        ("", _button(schedule, token, view)),
    )
    return f'<tr id="row-{escape(schedule.name)}">{card_cells(HEADINGS, cells)}</tr>'


async def page(request: Request) -> Response:
    after, view = param(request, "after"), view_of(request)
    if after and not ID_RE.fullmatch(after):
        raise HTTPError(400, "invalid after: use a schedule name")
    schedules = await seen_page(_store(request), caller(request), after, PAGE_SIZE + 1)
    # The buttons' token, for a role that may press them (one route: any schedule's).
    token = await _csrf(request) if may_post(request, "/ui/schedules/s/pause") else ""
    rows = "".join(_row(s, token, view) for s in schedules[:PAGE_SIZE])
    head = "".join(f"<th>{h}</th>" for h in HEADINGS)
    body = f'<div class="scroll"><table class="cards" id="schedules"><tr>{head}</tr>'
    body += rows or f'<tr><td colspan="{len(HEADINGS)}">no schedules</td></tr>'
    body += "</table></div>"
    if len(schedules) > PAGE_SIZE:
        more = view.href("/ui/schedules", after=schedules[PAGE_SIZE - 1].name)
        body += f'<nav class="pages"><a id="next" href="{more}">Next</a></nav>'
    return ui_page(request, "Schedules", body, refresh=True, view=view)


async def pause_or_resume(request: Request) -> Response:
    """The page's buttons: POST /schedules/{name}/pause or /resume, then back to the page."""
    name: str = request.path_params["name"]
    action: str = request.path_params["action"]
    if action not in ("pause", "resume") or not ID_RE.fullmatch(name):
        raise HTTPError(404, NOT_FOUND_PAGE)
    back = view_of(request).url("/ui/schedules")  # checked before anything changes
    await checked_form(request)
    now, by = time.time(), caller(request)
    if action == "pause":
        await _store(request).run(ops.schedules.change_schedule(name, paused, by))
    else:
        await _store(request).run(
            ops.schedules.change_schedule(name, lambda s: resumed(s, now) if s.paused else s, by)
        )
    return RedirectResponse(back, status_code=303)

"""The web UI's jobs page (/ui/jobs): the jobs newest first, filtered by status and node, with
their counts per status, paged newer and older, and searched by command; or the jobs one
schedule made (`schedule=`, alone: GET /jobs?schedule= says why), paged the same. Filtered by
namespace too (`namespace=`, without a node, as GET /jobs): a key limited to namespaces sees
only theirs, the list, the counts and the search alike (models/namespace.py scope).

One Redis round trip a page whatever the number of jobs: the page (LIST, or SEARCH) and the
counts (COUNTS) are sent together on the one connection. A search looks through at most
SEARCH_SCAN jobs of the filtered listing, newest first from the page's place, reading only
each record's head (store/scripts/listing.py SEARCH), and says how many it looked through;
"search older jobs" goes on from the last one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from html import escape

from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.http import HTTPError, caller, one_of, whole_number
from scheduler.api.jobs import listed_scope
from scheduler.api.params import param
from scheduler.api.state import store as _store
from scheduler.api.ui_charts import grouped
from scheduler.api.ui_dead import MAX_IDS, notice, retry_form
from scheduler.api.ui_forms import csrf as _csrf
from scheduler.api.ui_forms import may_post
from scheduler.api.ui_layout import View, card_cells, duration, job_status, page, view_of
from scheduler.models.job import (
    MAX_JOB_NUMBER,
    STATUSES,
    Job,
    attempt_of,
    job_decoder,
    job_number,
)
from scheduler.models.namespace import Scope
from scheduler.models.wire import ID_RE
from scheduler.store import ops
from scheduler.store.scripts.listing import JobQuery, SearchQuery

PAGE_SIZE = MAX_IDS  # 50: the failed list retries at most one page at once
# The jobs one search looks through: 8 to 10 ms of Redis time with usual commands (28
# characters; 3000-character ones: ~45 ms), whatever the jobs' output (docs/PERFORMANCE.md,
# The UI's search): a bound on what one page may cost, whatever the number of jobs stored.
SEARCH_SCAN = 5000
SEARCH_MAX_CHARS = 200
HEADINGS = (
    "job", "node", "status", "command", "attempt", "exit code", "created", "ran for", "finished",
)  # fmt: skip
# With ui_dead's notices.
READS = ("status", "node_id", "schedule", "namespace", "before", "after", "q", "refresh")


@dataclass(frozen=True, slots=True)
class Filters:
    """The page's query: its filters, its place (before or after a job number, 0: the
    newest) and its search."""

    status: str
    node_id: str
    before: int
    after: int
    search: str
    schedule: str = ""
    namespace: str = ""  # as asked ("": none named)
    # The namespaces listed (the one asked, or the caller's key's; None: every one).
    covered: Scope = None
    limited: tuple[str, ...] = ()  # the caller's key's namespaces (none: every one)

    def kept(self) -> dict[str, str | int]:
        return {
            "status": self.status, "node_id": self.node_id, "q": self.search,
            "schedule": self.schedule, "namespace": self.namespace,
        }  # fmt: skip


def _number(request: Request, name: str) -> int:
    raw = param(request, name)
    number = whole_number(raw.removeprefix("job-"), MAX_JOB_NUMBER)
    if raw and number is None:
        raise HTTPError(400, f"invalid {name}: use a job number")
    return number or 0


def filters_of(request: Request) -> Filters:
    """The page's query, or 400 naming what is wrong (nothing is read from Redis first)."""
    status, node_id, search = (
        param(request, "status"),
        param(request, "node_id"),
        param(request, "q"),
    )
    one_of("status", status, STATUSES)
    if node_id and not ID_RE.fullmatch(node_id):
        raise HTTPError(400, "invalid node_id: use 1 to 128 of A-Z a-z 0-9 . _ -")
    if len(search) > SEARCH_MAX_CHARS or not search.isprintable():
        raise HTTPError(400, f"invalid q: use at most {SEARCH_MAX_CHARS} printable characters")
    before, after = _number(request, "before"), _number(request, "after")
    if before and after:
        raise HTTPError(400, "invalid after: use before or after, not both")
    if search and after:
        raise HTTPError(400, "invalid after: a search pages older only (before=)")
    schedule = param(request, "schedule")
    if schedule and not ID_RE.fullmatch(schedule):
        raise HTTPError(400, "invalid schedule: use 1 to 128 of A-Z a-z 0-9 . _ -")
    if schedule and (status or node_id or search):
        raise HTTPError(400, "invalid schedule: use it without status, node_id and q")
    limited = caller(request).namespaces
    covered = listed_scope(request, limited, node_id)  # as GET /jobs
    namespace = param(request, "namespace")
    return Filters(status, node_id, before, after, search, schedule, namespace, covered, limited)


def _namespace_field(f: Filters) -> str:
    """A limited key's namespaces to choose from (all of them, or one); any key's otherwise,
    typed (no list of them is read for the form)."""
    if not f.limited:
        return (
            f'<input name="namespace" id="namespace" placeholder="namespace" '
            f'value="{escape(f.namespace)}">'
        )
    options = "".join(
        f'<option value="{escape(n)}"{" selected" if n == f.namespace else ""}>'
        f"{escape(n or 'my namespaces')}</option>"
        for n in ("", *f.limited)
    )
    return f'<select name="namespace" id="namespace">{options}</select>'


def _node_field(f: Filters) -> str:
    """The node filter, for a key that sees every namespace: a node's jobs are listed by
    node, not namespace (GET /jobs takes no node_id from a limited key)."""
    if f.limited:
        return ""
    return f'<input name="node_id" id="node_id" placeholder="node id" value="{escape(f.node_id)}">'


def _filter_form(f: Filters, view: View) -> str:
    options = "".join(
        f'<option value="{s}"{" selected" if s == f.status else ""}>{s or "any status"}</option>'
        for s in ("", *STATUSES)
    )
    return (
        '<form class="filters" method="get" action="/ui/jobs">'
        f'<select name="status" id="status">{options}</select>'
        f"{_node_field(f)}{_namespace_field(f)}"
        f'<input name="q" id="q" type="search" placeholder="command contains…" '
        f'maxlength="{SEARCH_MAX_CHARS}" value="{escape(f.search)}">'
        f'{view.hidden()}<button id="filter">Filter</button></form>'
    )


def _counts(f: Filters, counts: list[int], view: View) -> str:
    """ "all 55 · pending 3 · ...": each a link to its list (the node filter kept); a
    schedule's jobs say whose they are instead (no counts: no index by schedule and status)."""
    if f.schedule:
        name, to, every = escape(f.schedule), view.href("/ui/schedules"), view.href("/ui/jobs")
        return (
            f'<nav class="counts" id="counts">jobs made by schedule <a id="made-by" '
            f'href="{to}#row-{name}">{name}</a> <a href="{every}">all jobs</a></nav>'
        )
    links = []
    for status, count in zip(("", *STATUSES), counts, strict=True):
        current = ' class="current"' if status == f.status else ""
        href = view.href("/ui/jobs", status=status, node_id=f.node_id, namespace=f.namespace)
        name = status or "all"
        links.append(f'<a id="count-{name}"{current} href="{href}">{name} {grouped(count)}</a>')
    return f'<nav class="counts" id="counts">{"".join(links)}</nav>'


def job_row(job: Job, view: View) -> str:
    command = job.command or job.deploy_url
    short = command if len(command) <= 80 else command[:79] + "…"
    exit_code = "" if job.exit_code is None else str(job.exit_code)
    retries = f"{job.retry_count} retr{'y' if job.retry_count == 1 else 'ies'}"
    # Its namespace beside its id, but the default's (most deployments name none).
    ns = f' <span class="muted ns">{escape(job.namespace)}</span>' if job.namespace else ""
    cells = (
        ("", f'<a href="{view.href(f"/ui/jobs/{job.job_id}")}">{escape(job.job_id)}</a>{ns}'),
        ("", escape(job.node_id)),
        ("", job_status(job)),
        (' class="cmd wide"', f'<code title="{escape(command)}">{escape(short)}</code>'),
        (f' class="num" title="{retries}"', str(attempt_of(job))),
        (' class="num"', exit_code),
        ("", view.when(job.created_at)),
        (' class="num"', duration(job, view.now)),
        ("", view.when(job.finished_at)),
    )
    return f"<tr>{card_cells(HEADINGS, cells)}</tr>"


def _table(jobs: list[Job], view: View) -> str:
    head = "".join(f"<th>{h}</th>" for h in HEADINGS)
    empty = f'<tr><td colspan="{len(HEADINGS)}">no jobs</td></tr>'
    rows = "".join(job_row(job, view) for job in jobs) or empty
    return f'<div class="scroll"><table class="cards" id="jobs"><tr>{head}</tr>{rows}</table></div>'


def _pages(f: Filters, view: View, newer: int, older: int) -> str:
    """The paging links: Newest (off the first page), Newer (after job-`newer`), Older
    (before job-`older`); 0 for none."""
    links = []
    if f.before or f.after:
        links.append(f'<a id="newest" href="{view.href("/ui/jobs", **f.kept())}">Newest</a>')
    if newer:
        href = view.href("/ui/jobs", **f.kept(), after=newer)
        links.append(f'<a id="newer" href="{href}">← Newer</a>')
    if older:
        href = view.href("/ui/jobs", **f.kept(), before=older)
        links.append(f'<a id="older" href="{href}">Older →</a>')
    return f'<nav class="pages">{"".join(links)}</nav>'


def _number_of(job: Job) -> int:
    return job_number(job.job_id) or 0


async def _listed(request: Request, f: Filters) -> tuple[list[Job], list[int], int, int]:
    """(jobs shown, counts, newer bound, older bound) of a plain listing's page."""
    store = _store(request)
    # The page is oldest first from after job-N (the page just newer than the one seen), else
    # newest first; sent together with the counts on the one connection: one round trip.
    bound, newest = (f.after, False) if f.after else (f.before, True)
    query = JobQuery(f.node_id, f.status, bound, PAGE_SIZE + 1, f.covered, newest)
    counts: list[int] = []  # a schedule's page shows none (_counts)
    if f.schedule:
        blobs = await store.run(ops.schedules.schedule_jobs(f.schedule, query))
    else:
        blobs, counts = await asyncio.gather(
            store.run(ops.listings.list_jobs(query)),
            store.run(ops.listings.counts(f.node_id, f.covered)),
        )
    jobs = [job_decoder.decode(blob) for blob in blobs]
    more = len(jobs) > PAGE_SIZE
    shown = jobs[:PAGE_SIZE]
    if f.after:
        shown.reverse()  # newest first, as every page
        newer = _number_of(shown[0]) if more else 0
        older = _number_of(shown[-1]) if shown else 0
    else:
        newer = _number_of(shown[0]) if f.before and shown else 0
        older = _number_of(shown[-1]) if more else 0
    return shown, counts, newer, older


async def _searched(
    request: Request, f: Filters, view: View
) -> tuple[list[Job], list[int], int, str]:
    """(jobs shown, counts, older bound, what was searched) of a search's page."""
    store = _store(request)
    jobs_asked = JobQuery(f.node_id, f.status, f.before, PAGE_SIZE + 1, f.covered, newest=True)
    search = ops.listings.search(SearchQuery(jobs_asked, f.search, SEARCH_SCAN))
    found, counts = await asyncio.gather(
        store.run(search), store.run(ops.listings.counts(f.node_id, f.covered))
    )
    jobs = [job_decoder.decode(blob) for blob in found.jobs]
    shown = jobs[:PAGE_SIZE]
    older, more = 0, ""
    if len(jobs) > PAGE_SIZE:
        older = _number_of(shown[-1])
    elif found.more:
        href = view.href("/ui/jobs", **f.kept(), before=found.last)
        more = f' <a id="search-older" href="{href}">Search older jobs →</a>'
    place = f" before job-{f.before}" if f.before else ""
    which = "job" if found.looked == 1 else "jobs"
    said = (
        f'<p class="muted" id="searched">Searched the {grouped(found.looked)} most recent {which}'
        f"{place} of this list (at most {grouped(SEARCH_SCAN)} a page) for commands holding "
        f"<code>{escape(f.search)}</code>: {len(shown)}{'+' if older else ''} found.{more}</p>"
    )
    return shown, counts, older, said


async def jobs_page(request: Request) -> Response:
    f, view = filters_of(request), view_of(request)
    said = ""
    if f.search:
        shown, counts, older, said = await _searched(request, f, view)
        newer = 0
    else:
        shown, counts, newer, older = await _listed(request, f)
    retries = f.status == "failed" and may_post(request, "/ui/jobs/retry")
    token = await _csrf(request) if retries else ""
    dead = retry_form(shown, token, f.node_id, view) if token else ""
    body = (
        notice(request)
        + _counts(f, counts, view)
        + _filter_form(f, view)
        + said
        + dead
        + _table(shown, view)
        + _pages(f, view, newer, older)
    )
    first = not (f.before or f.after or f.search)
    return page(request, "Jobs", body, refresh=first, view=view)

"""The web UI's layout: every page (errors too) in one frame with the navigation, the
style, the refresh and its pause, status badges, and times as people read them.

A time shows as "3 min ago" with the absolute one in its `title` (a hover shows it). The
refresh is a script that waits for the reader (ui_refresh.py), left out at `?refresh=off`.
A paused page keeps `refresh=off` on every link and form of ours (`View.href`,
`View.hidden`), so it stays paused as the operator moves around, until "Resume refresh".
A page's own script (`page(script=...)`, the live output's) shares the refresh's <script>.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse

from scheduler.api.http import CALLER, HTTPError
from scheduler.api.params import query_of
from scheduler.api.state import settings as _settings
from scheduler.api.ui_headers import CSP, with_script
from scheduler.api.ui_refresh import page_script, secs_text
from scheduler.models.access_key import Principal
from scheduler.models.job import NOT_STARTED, Job
from scheduler.models.spans import span
from scheduler.models.wire import parse_rfc3339

REFRESH = "refresh"  # the query parameter: "off" pauses the refresh
# What the pause and resume links keep of a page's query: its filters and place. Not the
# bulk retry's notice (ui_dead.py): it was said once.
KEPT = ("status", "node_id", "q", "before", "after", "window")

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:8px 16px;display:flex;flex-wrap:wrap;gap:8px 16px;
align-items:center}
header nav{display:flex;gap:16px}
header a,header .brand{color:#fff;text-decoration:none;font-weight:600}
header .end{margin-left:auto;display:flex;gap:12px;align-items:center;min-width:0}
header .end a{font-weight:400;color:#d0d7de}
header .end>*{flex:none;white-space:nowrap}
header .who{flex:0 1 auto;min-width:0;display:flex;color:#d0d7de}
header .who .name{overflow:hidden;text-overflow:ellipsis;max-width:16em}
main{padding:16px}
main form{margin:8px 0}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eaeef2}
td.num{text-align:right;white-space:nowrap}
#jobs td{white-space:nowrap}
#jobs td.cmd{white-space:normal;min-width:12em;max-width:40em}
table.fields td code,pre{overflow-wrap:anywhere}
table.fields th{width:1%;white-space:nowrap}
#output pre,#key-help pre{max-height:24em;white-space:pre-wrap}
pre.command{white-space:pre-wrap;max-height:12em;margin:0 0 12px}
pre.command::before{content:"$ ";color:#57606a}
details.head summary{cursor:pointer;color:#57606a;margin:4px 0}
details.confirm{margin:8px 0}
details.confirm summary{display:inline-block;cursor:pointer;padding:1px 6px;
border:1px solid #8c959f;border-radius:4px;background:#fff}
details.confirm[open]{background:#fff1e5;border:1px solid #d0d7de;padding:8px}
.choices{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center}.choices form{margin:0}
#live-output{max-height:30em;min-height:3em;white-space:pre-wrap}
#live-output:empty::before{content:"no output yet";color:#57606a}
#live-output .stderr{color:#a40e26;background:#fff0f0}#live-output .note{color:#57606a}
#live-state{font-size:14px;font-weight:400;margin-left:4px}
h2 a.more{font-size:14px;font-weight:400}
time,.nowrap{white-space:nowrap}
time[title]{text-decoration:underline dotted #8c959f}
pre{background:#fff;border:1px solid #d0d7de;padding:8px;overflow:auto;max-height:40em}
.st{padding:1px 6px;border-radius:8px;background:#eaeef2;white-space:nowrap}
.pending{background:#fff8c5}.delayed,.waiting{background:#fbefff}.running{background:#ddf4ff}
.done{background:#dafbe1}.failed,.unhealthy{background:#ffebe9}.healthy{background:#dafbe1}
.paused,.drained{background:#fff1e5}.active{background:#dafbe1}
.reason{background:#fff}.cancelled{background:#eaeef2;color:#424a53}.cancelling{background:#fff1e5}
form.filters{margin-bottom:12px;display:flex;flex-wrap:wrap;gap:8px;align-items:center}
nav.counts{margin-bottom:12px;display:flex;flex-wrap:wrap;gap:6px 12px}
nav.counts a.current{font-weight:700;color:#1b1f24;text-decoration:none}
nav.pages{margin-top:12px;display:flex;flex-wrap:wrap;gap:16px}
.muted{color:#57606a}
.notice{background:#ddf4ff;border:1px solid #54aeff;padding:8px}
.error{background:#ffebe9;border:1px solid #ff8182;padding:8px;white-space:pre-wrap}
table.narrow{width:auto;min-width:20em}
svg.chart{display:block;width:100%;height:160px;background:#fff;border:1px solid #d0d7de}
svg.chart rect.col:hover{fill:rgba(0,0,0,.06)}
.axis{display:flex;justify-content:space-between;font-size:12px;color:#57606a;
margin-left:calc(5em + 4px)}
.unit{font-size:12px;color:#57606a}
.plot{display:flex;gap:4px}.plot svg.chart{flex:1;min-width:0}
.yaxis{display:flex;flex-direction:column;justify-content:space-between;height:162px;
width:5em;flex:none;text-align:right;font-size:12px;line-height:1;color:#57606a;
white-space:nowrap}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:4px 0}.key{white-space:nowrap}
svg.bar{width:5em;height:10px;vertical-align:middle}#node-load td{white-space:nowrap}
@media (max-width:700px){
main{padding:12px 8px}
table.cards,table.cards tbody{display:block;background:none}
table.cards tr:first-child{display:none}
table.cards tr{display:grid;grid-template-columns:1fr 1fr;grid-auto-flow:row dense;
background:#fff;border:1px solid #d0d7de;border-radius:6px;margin-bottom:8px}
table.cards td,#jobs td,#jobs td.cmd{border:0;white-space:normal;min-width:0;max-width:none;
overflow-wrap:anywhere}
table.cards td.wide,table.cards td[colspan]{grid-column:1/-1}
table.cards td:empty{display:none}
table.cards td[data-label]::before{content:attr(data-label);display:block;font-size:12px;
color:#57606a}
table.cards td.num{text-align:left}
}
"""
# A job not started yet (pending, delayed, waiting: models.job NOT_STARTED) has no output to
# wait for: its live section's heading says it waits for the start (ui_live.HEADINGS), once,
# with no empty box under it saying it again, nor "no output yet" as a running job's.
NOT_STARTED_OUTPUT = ",".join(
    f'#live[data-status="{status}"] #live-output:empty' for status in sorted(NOT_STARTED)
)
STYLE = STYLE + NOT_STARTED_OUTPUT + "{display:none}\n"


@dataclass(frozen=True, slots=True)
class View:
    """How a page is being looked at: whether its refresh is paused (kept on every link of
    ours), and the time its relative times count from."""

    paused: bool
    now: float

    def href(self, path: str, **params: str | int) -> str:
        """A link to one of our pages, escaped for an attribute, keeping the pause."""
        return escape(self.url(path, **params))

    def url(self, path: str, **params: str | int) -> str:
        """One of our pages with these parameters (those "" or 0 left out), keeping the
        pause: a link's, or where a form's POST sends the browser back to."""
        query = {name: value for name, value in params.items() if value not in ("", 0)}
        if self.paused:
            query[REFRESH] = "off"
        return f"{path}?{urlencode(query)}" if query else path

    def hidden(self) -> str:
        """A GET form's hidden field keeping the pause."""
        return f'<input type="hidden" name="{REFRESH}" value="off">' if self.paused else ""

    def when(self, stamp: str | None) -> str:
        """A stored RFC 3339 time as "3 min ago" ("in 5 s" ahead), the exact one on hover."""
        if not stamp:
            return ""
        try:
            at = parse_rfc3339(stamp)
        except ValueError:  # not a time of ours: shown as it is
            return escape(stamp)
        return self.moment(at, stamp)

    def moment(self, at: float, stamp: str = "") -> str:
        """An epoch time, as `when` shows one."""
        if not at:
            return ""
        ago = self.now - at
        said = "just now" if abs(ago) < 1 else f"{span(ago)} ago" if ago > 0 else f"in {span(-ago)}"
        exact = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
        return f'<time datetime="{escape(stamp or exact)}" title="{exact}">{said}</time>'


def duration(job: Job, now: float) -> str:
    """How long the job ran (finished - running_at), or has been running so far; "" for one
    that never ran."""
    if not job.running_at:
        return ""
    try:
        start = parse_rfc3339(job.running_at)
        end = parse_rfc3339(job.finished_at) if job.finished_at else now
    except ValueError:
        return ""
    so_far = "" if job.finished_at else " so far"
    return f"{span(max(0.0, end - start))}{so_far}"


def view_of(request: Request) -> View:
    """The page's View: `refresh=off` (when the route reads it, routes.TABLE) pauses; any
    other value is a 400."""
    query = query_of(request)
    raw = query.get(REFRESH) if REFRESH in query.reads else ""
    if raw not in ("", "off"):
        raise HTTPError(400, "invalid refresh: use refresh=off to pause, or leave it out")
    return View(paused=raw == "off", now=time.time())


def _who(request: Request) -> str:
    """Who is logged in, beside Log out: the session's key's name and role, as the door let
    it in (http.BearerAuth: CALLER), once when they are the same word (TINYAWS_API_KEY is
    "admin", the admin). A long name is cut short to fit (whole in the title), never the
    role."""
    who = request.scope.get(CALLER)
    if not isinstance(who, Principal):
        return ""
    name, role = escape(who.name), who.role.value
    said, role_said = (name, "") if name == role else (f"{name} · {role}", f"&nbsp;· {role}")
    return (
        f'<span class="who" id="who" title="{said}">'
        f'<span class="name">{name}</span>{role_said}</span>'
    )


def page(
    request: Request,
    title: str,
    body: str,
    *,
    refresh: bool = False,
    view: View | None = None,
    status: int = 200,
    navigation: bool = True,
    script: str = "",
) -> HTMLResponse:
    """The page in the layout; `refresh` (a page that changes by itself) reloads it every
    UI_REFRESH_SECS unless the View is paused (ui_refresh.py: not while the reader is at
    something), and offers the pause or the resume. Without `navigation` (the login, for
    someone not logged in) the header holds no links nor Log out: each would lead back to
    the login. `script`: the page's own, in its one inline script, last in its body, allowed
    by its hash (ui_headers.with_script)."""
    view = view or View(paused=False, now=time.time())
    meta, toggle, every = "", "", ""
    refreshing = refresh and not view.paused
    if refresh:
        period = _settings(request).ui_refresh_secs
        secs = secs_text(period)
        toggle = _toggle(request, view, secs)
        if refreshing:  # the meta refresh cannot wait for the reader: for no script only
            # Whole seconds, at least one: a browser reads content="0.5" as 0 (a reload loop).
            whole = max(1, round(period))
            meta = f'<noscript><meta http-equiv="refresh" content="{whole}"></noscript>'
            every = f' data-refresh="{secs}"'
    script = page_script(refreshing, script)
    logout = ""
    if navigation and _settings(request).api_key:
        logout = '<form method="post" action="/ui/logout"><button>Log out</button></form>'
        logout = _who(request) + logout
    nav = (
        "".join(
            f'<a href="{view.href(path)}">{name}</a>'
            for name, path in (
                ("Dashboard", "/ui"),
                ("Jobs", "/ui/jobs"),
                ("Nodes", "/ui/nodes"),
                ("Schedules", "/ui/schedules"),
            )
            if navigation
        )
        or '<span class="brand">scheduler</span>'
    )
    header = f'<nav>{nav}</nav><span class="end">{toggle}{logout}</span>'
    if not navigation:
        header = '<span class="brand">scheduler</span>'
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{meta}<title>{escape(title)} · scheduler</title><style>{STYLE}</style></head>"
        f"<body{every}>"
        f"<header>{header}</header>"
        f"<main><h1>{escape(title)}</h1>{body}</main>"
        f"{f'<script>{script}</script>' if script else ''}</body></html>"
    )
    response = HTMLResponse(html, status_code=status)  # no-store, frame denial: ui_headers.py
    if script:
        response.headers[CSP] = with_script(script)
    return response


def _toggle(request: Request, view: View, secs: str) -> str:
    """The link pausing or resuming the refresh: this page, its query kept but the pause."""
    query = query_of(request)
    kept = {name: query.get(name) for name in KEPT if name in query.reads and query.get(name)}
    if view.paused:
        link = View(paused=False, now=view.now).href(request.url.path, **kept)
        return f'<a id="resume" href="{link}">Resume refresh</a>'
    link = View(paused=True, now=view.now).href(request.url.path, **kept)
    return f'<a id="pause" href="{link}">Pause refresh ({secs} s)</a>'


def names_only(mapping: dict[str, str]) -> str:
    """A map's names, never its values: they are often secrets (env_vars), and a screen is
    easy to look over."""
    names = ", ".join(f"<code>{escape(name)}</code>" for name in sorted(mapping))
    return f'{names} <span class="muted">(values hidden)</span>' if mapping else ""


def card_cells(headings: tuple[str, ...], cells: tuple[tuple[str, str], ...]) -> str:
    """A row's cells, each (its attributes, its HTML), labelled with its heading: a `cards`
    table shows each row as a card of labelled values on a phone's width (STYLE)."""
    shown = []
    for label, (attrs, html) in zip(headings, cells, strict=True):
        labelled = f' data-label="{escape(label)}"' if label else ""
        shown.append(f"<td{attrs}{labelled}>{html}</td>")
    return "".join(shown)


def status_badge(status: str) -> str:
    return f'<span class="st {escape(status)}">{escape(status)}</span>'


def shown_status(job: Job) -> str:
    """The status as people say it: a cancelled job reads cancelled (on the wire it stays
    failed with failure_reason cancelled, for the original clients), any other the wire's."""
    return "cancelled" if job.failure_reason == "cancelled" else job.status


def job_status(job: Job) -> str:
    """The status badge (`shown_status`), and why the scheduler failed the job if it did
    (`failed timed_out`), or why a pending job has no node yet (`pending full`)."""
    status = shown_status(job)
    why = "" if status == "cancelled" else job.failure_reason or job.pending_reason
    if not why:
        return status_badge(status)
    return f'{status_badge(status)} <span class="st reason {escape(why)}">{escape(why)}</span>'

"""The web UI: a job's buttons, a node's drain buttons, the login; the dashboard at /ui (the
home) is ui_dashboard.py's, the jobs list ui_jobs.py's, a job's page ui_job.py's, the nodes
page ui_nodes.py's, the layout ui_layout.py's.

Server-rendered HTML: no build step, nothing from a CDN, no script but the UI's own: pages
that change refresh themselves (ui_refresh.py: never while the reader is at something;
paused with `refresh=off`), a job page follows its live output (ui_live.py). With
TINYAWS_API_KEY set it sits behind the keys: the login form takes any key (the admin's or a
named one) and starts a session as its key (ui_session.py: a random id in Redis with a TTL,
ended by logout, or when its named key is revoked); a page shows only the buttons its key's
role may press (ui_forms.may_post); wrong keys are counted per address (guesses.py); and
every form that changes something carries a CSRF token bound to the session, or without a
key to the deployment's secret.
"""

from __future__ import annotations

import os
import shlex
import time
from html import escape
from pathlib import Path

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from scheduler.api import nodes, retries, ui_session
from scheduler.api.http import NOT_FOUND_PAGE, HTTPError, caller
from scheduler.api.state import credentials as _credentials
from scheduler.api.state import store as _store
from scheduler.api.ui_forms import check_origin, checked_form, form_lists
from scheduler.api.ui_layout import page, view_of
from scheduler.config import up_key
from scheduler.models.wire import ID_RE
from scheduler.store import ops


async def _posted_job_id(request: Request) -> tuple[str, str]:
    """The job of a button's POST, once its form's token is checked, and the job's page to
    go back to (its refresh paused if it was): every check before anything changes."""
    job_id: str = request.path_params["job_id"]
    if not ID_RE.fullmatch(job_id):
        raise HTTPError(404, "job not found")
    back = view_of(request).url(f"/ui/jobs/{job_id}")
    await checked_form(request)
    return job_id, back


async def cancel(request: Request) -> Response:
    """The job page's cancel button: DELETE /jobs/{id}, then back to the job."""
    job_id, back = await _posted_job_id(request)
    by = caller(request)
    await _store(request).run(ops.jobs.cancel(job_id, time.time(), by.who, by.scope))
    return RedirectResponse(back, status_code=303)


async def retry(request: Request) -> Response:
    """The job page's retry button: POST /jobs/{id}/retry, then back to the job."""
    job_id, back = await _posted_job_id(request)
    await retries.retry_one(request, job_id)
    return RedirectResponse(back, status_code=303)


async def drain_or_undrain(request: Request) -> Response:
    """The nodes page's buttons: the operator's POST /nodes/{id}/drain or /undrain, then
    back to the page (its refresh paused if it was). Every check before anything changes."""
    node_id: str = request.path_params["node_id"]
    action: str = request.path_params["action"]
    if action not in ("drain", "undrain") or not ID_RE.fullmatch(node_id):
        raise HTTPError(404, NOT_FOUND_PAGE)
    back = view_of(request).url("/ui/nodes")
    await checked_form(request)
    listed = await nodes.listed(request, node_id)
    if action == "drain":
        await _store(request).run(ops.nodes.drain_node(node_id, time.time(), listed=listed))
    else:
        await _store(request).run(ops.nodes.undrain_node(node_id, listed=listed))
    return RedirectResponse(back, status_code=303)


def up_key_file(request: Request) -> str:
    """The file `up` keeps this server's key in (config/up_key.py), as a shell line that
    reads it: the reader's shell need not have the server's XDG_STATE_HOME (`$XDG_STATE_HOME`
    read empty there: `cat "/tinyaws-scheduler/..."`). `up` gives the API its environment:
    XDG_STATE_HOME, and its own address as SCHEDULER_URL, which names the file. When that file
    is there (`up`'s session: loopback by default, the file its user's only) under the home,
    it shows where it is, the home as ~ (naming no user); else (not started by `up`, or kept
    outside the home, whose folders may name a user: the login is public) the one the
    browser's address would have, its folder by the variable's name, the default when it is
    unset in the reader's shell."""
    told = up_key.address(os.environ.get("SCHEDULER_URL", ""))
    kept = up_key.state_home() / up_key.relative(*told) if told else None
    home = Path.home()
    if kept is not None and home != Path("/") and kept.is_relative_to(home) and kept.is_file():
        return "~/" + shlex.quote(str(kept.relative_to(home)))
    file = up_key.relative(*(up_key.address(str(request.url)) or ("HOST", 80)))
    if os.environ.get("XDG_STATE_HOME"):
        default = up_key.DEFAULT_STATE.replace("~", "$HOME", 1)  # in quotes: no ~ expands
        return f'"${{XDG_STATE_HOME:-{default}}}/{file}"'
    return f"{up_key.DEFAULT_STATE}/{file}"


def _where_up_keeps_the_key(request: Request) -> str:
    """The login's help: the key is TINYAWS_API_KEY; `up` without one made one, in a file
    named after the address it serves."""
    return (
        '<div id="key-help"><p>The key is the deployment\'s <code>TINYAWS_API_KEY</code>, or a '
        "named key an admin made for you (<code>scheduler key add</code>).</p>"
        "<p>Started with <code>scheduler up</code> (or <code>./dev up</code>) without one? It "
        "made a key for the session, readable by your user only, and printed where when it "
        f"started (<code>key: in …</code>):</p><pre>cat {escape(up_key_file(request))}</pre>"
        '<p class="muted">(The file is removed when <code>up</code> stops.)</p></div>'
    )


async def home(request: Request) -> Response:
    """GET /: where a browser first goes (it accepts HTML), sent to the web UI (its login
    form until logged in). Any other client gets the 404 of no route, as before: a job id
    `..` is a path a client's URL library makes `/` (tests/client)."""
    if "text/html" not in request.headers.get("accept", ""):
        raise HTTPError(404, NOT_FOUND_PAGE)
    return RedirectResponse("/ui", status_code=303)


async def login_page(request: Request, error: str = "") -> Response:
    said = f'<p class="failed">{escape(error)}</p>' if error else ""
    form = (
        f'{said}<form method="post" action="/ui/login">'
        '<input type="password" name="key" id="key" placeholder="your key" autofocus>'
        '<button id="login">Log in</button></form>'
    )
    return page(request, "Log in", form + _where_up_keeps_the_key(request), navigation=False)


async def login(request: Request) -> Response:
    """The login form's POST: a session for any right key (TINYAWS_API_KEY or a named one,
    as whose key it is), whatever its address got wrong before; a wrong one is counted
    against the address (guesses.py): 401, or 429 past AUTH_FAILURES_MAX."""
    check_origin(request)
    found = _credentials(request)
    who = await found.key_of_again(request.scope, (await _form(request)).get("key", ""))
    if who is None:
        # The form again, whatever the refusal: past the limit (429) the right key is still
        # served, so the operator behind a guessed-at address types it here.
        status, message, headers = await found.refused_asgi(request.scope, guessed=True)
        response = await login_page(request, "wrong key" if status == 401 else message)
        response.status_code = status
        response.headers.update(headers)
        return response
    response = RedirectResponse("/ui", status_code=303)
    await ui_session.start(request, response, who)
    return response


async def logout(request: Request) -> Response:
    """Ends the session in Redis, so its cookie stops working wherever it is kept."""
    check_origin(request)
    response = RedirectResponse("/ui/login", status_code=303)
    await ui_session.end(request, response)
    return response


class LoginForm(msgspec.Struct):
    """The login form, as its route is described (routes.TABLE, openapi.py): the key."""

    key: str


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded form (4 KiB at most: a key, a token): each name's first value."""
    return {name: values[0] for name, values in (await form_lists(request)).items()}

"""The Starlette application: the /jobs API of CONTRACT 2.3, plus the built-in registry.

Handlers are thin: decode and validate, call the store (one script, one round trip), send the
bytes the store returns.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from scheduler.api import hot, longpoll, services, ui
from scheduler.api import metrics as metrics_api
from scheduler.api import nodes as nodes_api
from scheduler.api.agents import AgentAuth, ReportBudget
from scheduler.api.errors import exception_handlers
from scheduler.api.http import (
    BearerAuth,
    HTTPError,
    declared_length,
    json_array,
    json_bytes,
    read_body,
    route,
    text_error,
    whole_number,
)
from scheduler.api.lane import Lane
from scheduler.api.state import agent_auth as _auth
from scheduler.api.state import node_source as _nodes
from scheduler.api.state import store as _store
from scheduler.config import Settings
from scheduler.nodes.registry import NodeSource, node_source
from scheduler.snapshot.db import MAX_JOB_NUMBER
from scheduler.snapshot.restore import restore_at_start
from scheduler.store.jobs import JobStore
from scheduler.store.scripts.jobs import Polled

log = logging.getLogger("scheduler.api")

HEALTH = msgspec.json.encode({"service": "scheduler", "status": "healthy"})
DEFAULT_PAGE, MAX_PAGE = 1000, 10_000


def query_first(request: Request, name: str) -> str:
    """The first value of a query parameter, as Go's URL.Query().Get."""
    values = request.query_params.getlist(name)
    return values[0] if values else ""


async def health(request: Request) -> Response:
    return json_bytes(HEALTH)


async def schedule(request: Request) -> Response:
    placement = await _nodes(request).placement("")
    node_id = await _store(request).pick(placement, time.time())
    return json_bytes(msgspec.json.encode({"node_id": node_id}))


async def submit_job(request: Request) -> Response:
    blob = await hot.create_job(request.app.state, _body_of(request))
    return json_bytes(blob, status=201)


def _body_of(request: Request) -> hot.BodyReader:
    async def read(limit: int, charge: hot.Charge) -> bytes:
        return await read_body(request, limit, charge)

    return read


def _page(request: Request) -> tuple[int, int, bool]:
    """(limit, bound, newest): the default order pages on with `after` (ascending, as the
    original); `order=newest` lists newest first and pages on with `before`."""
    raw_limit, raw_order = query_first(request, "limit"), query_first(request, "order")
    limit = whole_number(raw_limit, MAX_PAGE)
    if raw_limit and (limit is None or limit < 1):
        raise HTTPError(400, f"invalid limit: use 1 to {MAX_PAGE}")
    if raw_order not in ("", "oldest", "newest"):
        raise HTTPError(400, "invalid order: use oldest or newest")
    newest = raw_order == "newest"
    name, other = ("before", "after") if newest else ("after", "before")
    if query_first(request, other):
        raise HTTPError(400, f"invalid {other}: use {name} with order={raw_order or 'oldest'}")
    raw_bound = query_first(request, name)
    # No job number is above MAX_JOB_NUMBER (it is the score, exact as a double).
    bound = whole_number(raw_bound.removeprefix("job-"), MAX_JOB_NUMBER)
    if raw_bound and (not raw_bound.startswith("job-") or bound is None):
        raise HTTPError(400, f"invalid {name}: use a job id like job-42")
    return (limit or DEFAULT_PAGE), (bound or 0), newest


def _polled(polled: Polled) -> Response:
    body, headers = hot.polled_reply(polled)
    return Response(body + b"\n", media_type="application/json", headers=headers)


async def list_jobs(request: Request) -> Response:
    node_id, status = query_first(request, "node_id"), query_first(request, "status")
    hot.check_node_id(node_id)
    store = _store(request)
    wait = longpoll.wait_secs(request)
    if node_id and status == "pending":
        caller = _auth(request).caller(request)
        if wait is None:
            return _polled(await store.poll(node_id, caller))
        polled = await longpoll.unless_disconnected(request, store.poll_wait(node_id, caller, wait))
        return _polled(polled or Polled([], []))
    if wait is not None:
        raise HTTPError(400, "wait needs node_id and status=pending")
    limit, bound, newest = _page(request)
    if newest and bound == 0 and query_first(request, "before"):
        return json_array([])  # before=job-0: nothing is older
    return json_array(await store.list(node_id, status, bound, limit, newest))


def _job_id(request: Request) -> str:
    return hot.job_id_or_404(request.path_params["job_id"])


async def get_job(request: Request) -> Response:
    job_id, wait = _job_id(request), longpoll.wait_secs(request)
    if wait is None:
        return json_bytes(await hot.read_job(_store(request), job_id))
    waiting = _store(request).get_wait(job_id, longpoll.status_not(request), wait)
    blob = await longpoll.unless_disconnected(request, waiting)
    if blob is None:
        raise HTTPError(404, "job not found")
    return json_bytes(blob)


async def update_job(request: Request) -> Response:
    """An agent's report (hot.report_job)."""
    report = (_job_id(request), _auth(request).caller(request), declared_length(request))
    return json_bytes(await hot.report_job(request.app.state, report, _body_of(request)))


async def cancel_job(request: Request) -> Response:
    """DELETE /jobs/{id} (the key): a pending job is cancelled at once, a running one is
    cancelling until its agent has killed it (store/scripts/jobs.py, CANCEL_JOB)."""
    return json_bytes(await _store(request).cancel(_job_id(request), time.time()))


# Starlette's own errors (no route, wrong method); the rest are errors.REPLIES.


async def on_starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return text_error(404, "404 page not found")
    return text_error(exc.status_code, exc.detail, dict(exc.headers or {}))


EXCEPTION_HANDLERS: dict[type[Exception] | int, Callable[..., object]] = {
    **exception_handlers(),
    HTTPException: on_starlette_error,
}


def job_routes() -> list[Route]:
    return [
        route("/health", GET=health),
        route("/schedule", GET=schedule),
        route("/jobs", GET=list_jobs, POST=submit_job),
        route("/jobs/{job_id}", GET=get_job, PATCH=update_job, DELETE=cancel_job),
    ]


def tune_gc() -> None:
    """Measured (benchmarks/api_bench.py): the cyclic GC's full collections walk every object
    loaded at start-up and made the p99 of a submit ~37 ms against ~10 ms without them, and
    cost a quarter of the throughput. Freezing the start-up objects takes them out of every
    later collection; a higher first threshold makes collections rarer. Request objects are
    short-lived and mostly freed by reference counting, so memory stays flat."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def warn_if_agents_open(settings: Settings) -> None:
    if settings.api_key and settings.agent_auth == "open":
        log.warning(
            "TINYAWS_API_KEY is set but AGENT_AUTH=open: without any key, anyone who can "
            "reach this API can register nodes that receive jobs, claim pending jobs and read "
            "their env_vars, and report forged results. Set AGENT_AUTH=token once no original "
            "Rust agent is left (README, Security)."
        )


def create_app(settings: Settings | None = None, nodes: NodeSource | None = None) -> Starlette:
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.settings = settings
        warn_if_agents_open(settings)
        # Before serving: a Redis that lost its data gets the snapshot back first (snapshot.py).
        await restore_at_start(settings)
        app.state.store = JobStore.connect(settings)
        app.state.nodes = nodes or node_source(settings)
        tune_gc()
        undo_signals = longpoll.answer_waits_on_exit(app.state.store.notifier)
        try:
            yield
        finally:
            undo_signals()
            await app.state.nodes.aclose()
            await app.state.store.aclose()

    routes = job_routes() + ui.routes()
    if settings.builtin_registry:
        routes += nodes_api.routes() + services.routes()
    middleware = [Middleware(BearerAuth, api_key=settings.api_key)] if settings.api_key else []
    request_stats = metrics_api.RequestStats()
    if settings.metrics == "on":
        routes.append(route("/metrics", GET=metrics_api.metrics))
        middleware.insert(0, Middleware(metrics_api.RequestMetrics, stats=request_stats))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False
    app.state.request_stats = request_stats
    app.state.agent_auth = AgentAuth.from_settings(settings)
    app.state.report_budget = ReportBudget(settings.report_bytes_in_flight)
    stats = request_stats if settings.metrics == "on" else None
    app.state.lane = Lane(app.state, settings.api_key, stats)  # served by server.LaneProtocol
    return app

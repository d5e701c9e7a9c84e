"""The Starlette application: the /jobs API of CONTRACT 2.3, plus the built-in registry.

Handlers are thin: decode and validate, call the store (one script, one round trip), send the
bytes the store returns.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from scheduler.api import longpoll, services, ui
from scheduler.api import metrics as metrics_api
from scheduler.api import nodes as nodes_api
from scheduler.api.agents import PRECHECK_OVER_BYTES, AgentAuth, ReportBudget
from scheduler.api.http import (
    BearerAuth,
    HTTPError,
    declared_length,
    json_array,
    json_bytes,
    read_body,
    route,
    text_error,
    too_large,
    whole_number,
)
from scheduler.api.state import agent_auth as _auth
from scheduler.api.state import node_source as _nodes
from scheduler.api.state import settings as _settings
from scheduler.api.state import store as _store
from scheduler.config import Settings
from scheduler.models import (
    ID_RE,
    REPORT_STATUSES,
    DecodeError,
    InvalidInput,
    JobCreate,
    JobUpdate,
    NewJob,
    bound_output,
    decode_go_style,
    record_encoder,
    rfc3339,
    validate_create,
    validate_update,
)
from scheduler.nodes.placement import NoHealthyNodes
from scheduler.nodes.registry import NodeSource, RegistryError, node_source
from scheduler.snapshot.db import MAX_JOB_NUMBER
from scheduler.snapshot.restore import restore_at_start
from scheduler.store.commands import (
    Conflict,
    Forbidden,
    JobNotFound,
    NodeNotFound,
    Polled,
    StoreNotReady,
    TooManyNodes,
    Unauthorized,
)
from scheduler.store.jobs import JobStore
from scheduler.store.node_commands import ServiceNotFound, TooManyServices
from scheduler.store.topology import ReplicasNotAcked

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
    body = await read_body(request, _settings(request).max_body_bytes)
    try:
        req = decode_go_style(body, JobCreate)
    except DecodeError as exc:
        raise HTTPError(400, "failed to decode job", {"X-Error-Detail": _header(exc)}) from None
    if not req.command and not req.deploy_url:
        raise HTTPError(400, "command or deploy_url is required")
    validate_create(req)
    placement = await _nodes(request).placement(req.instance_id)
    now = time.time()
    job_json = record_encoder.encode(NewJob.from_request(req, rfc3339(now)))
    store = _store(request)
    try:
        blob = await store.create(job_json, placement, now)
    except StoreNotReady:
        # Redis lost its data under this running process: bring the snapshot back (or wait
        # for the process doing it) before taking a new id, then try once more.
        await restore_at_start(_settings(request))
        blob = await store.create(job_json, placement, now)
    return json_bytes(blob, status=201)


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
    """The jobs, as the original; the ids of the node's jobs being cancelled ride in a
    header, which the original agent ignores and the reference agent acts on."""
    response = json_array(polled.jobs)
    if polled.cancels:
        response.headers["X-Cancel-Jobs"] = ",".join(polled.cancels)
    return response


async def list_jobs(request: Request) -> Response:
    node_id, status = query_first(request, "node_id"), query_first(request, "status")
    if node_id and not ID_RE.fullmatch(node_id):
        raise HTTPError(400, "invalid node_id: use 1 to 128 of A-Z a-z 0-9 . _ -")
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
    job_id: str = request.path_params["job_id"]
    if not ID_RE.fullmatch(job_id):
        raise HTTPError(404, "job not found")
    return job_id


async def get_job(request: Request) -> Response:
    job_id, wait = _job_id(request), longpoll.wait_secs(request)
    if wait is None:
        blob = await _store(request).get(job_id)
    else:
        waiting = _store(request).get_wait(job_id, longpoll.status_not(request), wait)
        blob = await longpoll.unless_disconnected(request, waiting)
    if blob is None:
        raise HTTPError(404, "job not found")
    return json_bytes(blob)


async def update_job(request: Request) -> Response:
    """An agent's report. The job id, the body's declared size and (for a large or unsized
    body, or in token mode) the job and the caller are checked before a byte of the body is
    read, and the bytes held at once are bounded: a stranger's 64 MiB bodies cost nothing."""
    settings = _settings(request)
    job_id = _job_id(request)
    caller = _auth(request).caller(request)
    size = declared_length(request)
    if size is not None and size > settings.max_report_bytes:
        raise too_large(settings.max_report_bytes)
    # A node token is checked before the body too: in token mode a stranger's body, however
    # small, is never read.
    if size is None or size > PRECHECK_OVER_BYTES or caller not in ("open", "key"):
        await _store(request).check_report(job_id, caller)
    budget: ReportBudget = request.app.state.report_budget
    with budget.reading() as charge:
        req = _decode_update(await read_body(request, settings.max_report_bytes, charge))
        limit = settings.output_limit_bytes
        req = msgspec.structs.replace(
            req, stdout=bound_output(req.stdout, limit), stderr=bound_output(req.stderr, limit)
        )
        return json_bytes(await _store(request).report(job_id, req, time.time(), caller))


async def cancel_job(request: Request) -> Response:
    """DELETE /jobs/{id} (the key): a pending job is cancelled at once, a running one is
    cancelling until its agent has killed it (store/scripts.py, CANCEL_JOB)."""
    return json_bytes(await _store(request).cancel(_job_id(request), time.time()))


def _decode_update(body: bytes) -> JobUpdate:
    try:
        req = decode_go_style(body, JobUpdate)
    except DecodeError as exc:
        raise HTTPError(400, "failed to decode update", {"X-Error-Detail": _header(exc)}) from None
    if req.status not in REPORT_STATUSES:
        raise HTTPError(400, "invalid status")
    validate_update(req)
    return req


def _header(exc: Exception) -> str:
    """An exception's text made safe for a header value."""
    return str(exc).encode("ascii", "replace").decode()[:300].replace("\n", " ")


# Exceptions -> the original's plain-text errors.


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPError)
    return text_error(exc.status, exc.message, exc.headers)


async def on_starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return text_error(404, "404 page not found")
    return text_error(exc.status_code, exc.detail, dict(exc.headers or {}))


def _status(code: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handler(request: Request, exc: Exception) -> Response:
        return text_error(code, str(exc))

    return handler


async def _client_gone(request: Request, exc: Exception) -> Response:
    # A client that hangs up mid-body is routine (agents restart, load balancers time out):
    # one INFO line, no traceback. Nothing was decoded, so nothing changed; the answer goes
    # nowhere (the server drops sends after a disconnect).
    log.info("client went away during %s %s", request.method, request.url.path)
    return text_error(400, "client disconnected")


async def _not_acked(request: Request, exc: Exception) -> Response:
    # REDIS_MIN_REPLICAS_ACKED: the change is on the primary, maybe not on enough replicas.
    log.warning("%s %s: %s", request.method, request.url.path, exc)
    return text_error(503, str(exc))


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.error("redis error on %s %s: %s", request.method, request.url.path, exc)
    return text_error(503, "store unavailable")


EXCEPTION_HANDLERS: dict[type[Exception] | int, Callable[..., object]] = {
    HTTPError: on_http_error,
    HTTPException: on_starlette_error,
    InvalidInput: _status(400),
    RegistryError: _status(503),
    StoreNotReady: _status(503),
    NoHealthyNodes: _status(503),
    JobNotFound: _status(404),
    NodeNotFound: _status(404),
    Unauthorized: _status(401),
    Forbidden: _status(403),
    TooManyNodes: _status(503),
    ServiceNotFound: _status(404),
    TooManyServices: _status(503),
    Conflict: _status(409),
    ReplicasNotAcked: _not_acked,
    RedisError: _unavailable,
    ClientDisconnect: _client_gone,
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
    return app

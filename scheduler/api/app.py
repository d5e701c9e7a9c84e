"""The Starlette application: its routes from routes.TABLE (the /jobs API of CONTRACT 2.3, the
web UI, the built-in registry, /metrics), the key and metrics middleware, the error replies,
and the start-up (snapshot restore, Redis, the node source)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Callable

from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api import longpoll
from scheduler.api import metrics as metrics_api
from scheduler.api.agent_networks import AgentNetworks, AgentNetworksGate
from scheduler.api.agents import AgentAuth, ReportBudget
from scheduler.api.boundary import Boundary, BrowserBoundary
from scheduler.api.errors import exception_handlers
from scheduler.api.guesses import Credentials
from scheduler.api.http import NOT_FOUND_PAGE, BearerAuth, ParamsDoor, text_error
from scheduler.api.lane import Lane
from scheduler.api.routes import TABLE
from scheduler.api.stores import Store
from scheduler.api.ui_errors import UIErrors
from scheduler.api.ui_headers import UIHeaders
from scheduler.api.upgrade import OldLayoutWatch
from scheduler.config import Settings
from scheduler.config.networks import any_network
from scheduler.config.secrets import check_secrets
from scheduler.nodes.registry import NodeSource, node_source
from scheduler.snapshot.layout import check_layout_if_reachable
from scheduler.snapshot.restore import restore_at_start
from scheduler.store import ops
from scheduler.store.errors import StoreNotReady
from scheduler.store.jobs import JobStore

log = logging.getLogger("scheduler.api")

# Starlette's own errors (no route, wrong method); the rest are errors.REPLIES.


async def on_starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return text_error(404, NOT_FOUND_PAGE)
    return text_error(exc.status_code, exc.detail, dict(exc.headers or {}))


EXCEPTION_HANDLERS: dict[type[Exception] | int, Callable[..., object]] = {
    **exception_handlers(),
    HTTPException: on_starlette_error,
}


def tune_gc() -> None:
    """Measured (benchmarks/api_bench.py): the cyclic GC's full collections walk every object
    loaded at start-up and made the p99 of a submit ~37 ms against ~10 ms without them, and
    cost a quarter of the throughput. Freezing the start-up objects takes them out of every
    later collection; a higher first threshold makes collections rarer. Request objects are
    short-lived and mostly freed by reference counting, so memory stays flat."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def warn_if_agents_open(settings: Settings) -> None:
    """Who the open agent calls answer, named as narrowly as AGENT_NETWORKS draws it."""
    if not settings.api_key or settings.agent_auth != "open":
        return
    who = (
        "anyone who can reach this API"
        if any_network(settings.agent_network_list)
        else f"anyone on AGENT_NETWORKS ({settings.agent_networks.strip()})"
    )
    log.warning(
        "TINYAWS_API_KEY is set but AGENT_AUTH=open: without any key, %s can register nodes "
        "that receive jobs, claim pending jobs and read their env_vars, and report forged "
        "results. Set AGENT_AUTH=token once no original Rust agent is left "
        "(docs/SECURITY.md).",
        who,
    )


async def keep_series(store: Store) -> None:
    """SERIES_RETENTION_SECS for the scripts, best effort: Redis down at start only leaves
    the minutes' 2-day default (lua/includes/series.lua) until the next start."""
    try:
        await store.run(ops.listings.keep_series())
    except (RedisError, OSError) as exc:
        log.warning("series retention not written, Redis unavailable: %s", exc)


async def open_store(settings: Settings) -> Store:
    """The store of one shard's layout, or with SCHEDULER_SHARDS > 1 of every shard: the shard
    count checked against the recorded one (before any restore, which would fill another
    layout's shards), each shard's snapshot restored into a Redis that lost its data
    (snapshot.py), then a sharded deployment's layout read (store/shard_layout.py; while Redis
    is unreachable, on first use)."""
    await asyncio.to_thread(check_layout_if_reachable, settings, log)
    store = JobStore.connect(settings)
    await restore_at_start(settings)
    if settings.shards > 1:
        try:
            await store.start()
        except (RedisError, OSError, StoreNotReady) as exc:
            log.warning("the shards' layout not read yet: %s", exc)
    return store


def create_app(settings: Settings | None = None, nodes: NodeSource | None = None) -> Starlette:
    """The app of `settings`, or of the environment: the factory that any other ASGI server
    and `serve --workers N`'s processes start from, where a key too weak to guess stops it
    as it stops `serve` (config/secrets.py: ConfigError, naming the variable)."""
    if settings is None:
        settings = Settings.from_env()
        check_secrets(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.settings = settings
        warn_if_agents_open(settings)
        # Before serving: a Redis that lost its data gets the snapshot back first (snapshot.py).
        app.state.store = await open_store(settings)
        await keep_series(app.state.store)
        store = app.state.store
        app.state.nodes = nodes or node_source(
            settings, lambda now: store.run(ops.nodes.nodes(now))
        )
        tune_gc()
        undo_signals = longpoll.answer_waits_on_exit(app.state.store.notifiers)
        app.state.old_layout.start()
        keyring = None
        if settings.api_key:  # named keys mean something only beside the admin key
            keyring = asyncio.create_task(
                credentials.keyring.keep_fresh(store, settings.keyring_refresh_secs)
            )
        flusher = None
        if settings.metrics == "on":
            flusher = asyncio.create_task(
                metrics_api.keep_flushing(
                    app.state.store, app.state.request_stats, settings.metrics_flush_secs
                )
            )
        try:
            yield
        finally:
            undo_signals()
            for task in (flusher, keyring):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await app.state.old_layout.aclose()
            await app.state.nodes.aclose()
            await app.state.store.aclose()

    metrics_on = settings.metrics == "on"
    routes = TABLE.starlette_routes(registry=settings.builtin_registry, metrics=metrics_on)
    # The UI's headers outside every door: its redirects and refusals carry them too; its
    # refusals are pages of the UI (ui_errors.py), whoever made them. Then the browser
    # boundary (boundary.py): a rebound Host or a page's POST is refused before anything
    # else looks at the request, with a key or without. Then the door: the agents' networks
    # and the key rule read the parameters it parsed.
    boundary = Boundary(settings.allowed_hosts)
    middleware = [
        Middleware(UIHeaders),
        Middleware(UIErrors),
        Middleware(BrowserBoundary, boundary=boundary),
        Middleware(ParamsDoor, routes=TABLE),
    ]
    # The credentials and the count of wrong ones, for every door: the key rule here and on
    # the lane, the agents' networks, the agent routes, the login form (guesses.py).
    credentials = Credentials.from_settings(settings)
    networks = AgentNetworks.from_settings(settings, credentials)
    if networks is not None:
        middleware.append(Middleware(AgentNetworksGate, networks=networks, routes=TABLE))
    if settings.api_key:
        door = Middleware(BearerAuth, credentials=credentials, routes=TABLE)
        middleware.append(door)
    request_stats = metrics_api.RequestStats()
    if metrics_on:
        labels = Middleware(
            metrics_api.RequestMetrics, stats=request_stats, label=TABLE.request_label
        )
        middleware.insert(0, labels)
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False
    app.state.request_stats = request_stats
    app.state.agent_auth = AgentAuth.from_settings(settings, credentials, TABLE)
    app.state.report_budget = ReportBudget(settings.report_bytes_in_flight)
    app.state.credentials = credentials
    app.state.routes = TABLE  # the UI's pages ask it which buttons a role may press
    app.state.old_layout = OldLayoutWatch(settings)  # checked from the lifespan on
    stats = request_stats if metrics_on else None
    # Served by server.LaneProtocol.
    app.state.lane = Lane(app.state, credentials, stats, networks=networks, boundary=boundary)
    app.state.head_timeout_secs = settings.head_timeout_secs  # read by api/deadline.py
    return app

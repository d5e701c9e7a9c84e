"""Exceptions -> the original's plain-text errors, in one table that the Starlette app's
exception handlers and the hot lane (lane.py) both answer from, so the two cannot drift.
Unauthorized, a credential refused (by AgentAuth or a script's node_access), is answered by
the door's Credentials on both (guesses.py: counted when the call sent one)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from scheduler.api.http import HTTPError, text_error
from scheduler.api.state import credentials
from scheduler.models.namespace import OutsideNamespace
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import NoHealthyNodes
from scheduler.nodes.registry import RegistryError
from scheduler.store.errors import (
    Conflict,
    Forbidden,
    IdempotencyMismatch,
    JobNotFound,
    JobNotRunning,
    KeyNotFound,
    LayoutChanged,
    NodeNotFound,
    OverQuota,
    ReplicasNotAcked,
    ScheduleNotFound,
    ServiceNotFound,
    StagedPartLost,
    StoreNotReady,
    TooManyNodes,
    TooManySchedules,
    TooManyServices,
    Unauthorized,
)

log = logging.getLogger("scheduler.api")

# status, message (a "\n" is added), extra headers
Reply = tuple[int, str, dict[str, str]]
# (the exception, "METHOD /path" for the log) -> its reply
Replier = Callable[[Exception, str], Reply]


def _http_error(exc: Exception, where: str) -> Reply:
    assert isinstance(exc, HTTPError)
    return exc.status, exc.message, exc.headers


def _status(code: int) -> Replier:
    def reply(exc: Exception, where: str) -> Reply:
        return code, str(exc), {}

    return reply


# A moment's unavailability (Redis busy, loading, failing over or not acknowledging, a
# registry down, a layout changing): Retry-After says a try again soon may work, and the
# Python client sends again only such 503s (client/retrying.py). The others stand until an
# operator acts (no healthy node, too many nodes): answered at once, with none.
SOON = {"Retry-After": "1"}


def _soon(exc: Exception, where: str) -> Reply:
    return 503, str(exc), dict(SOON)


def _not_acked(exc: Exception, where: str) -> Reply:
    # REDIS_MIN_REPLICAS_ACKED: the change is on the primary, maybe not on enough replicas.
    log.warning("%s: %s", where, exc)
    return 503, str(exc), dict(SOON)


def _client_gone(exc: Exception, where: str) -> Reply:
    # A client that hangs up mid-body is routine (agents restart, load balancers time out):
    # one INFO line, no traceback. Nothing was decoded, so nothing changed; the answer goes
    # nowhere (the server drops sends after a disconnect).
    log.info("client went away during %s", where)
    return 400, "client disconnected", {}


class OutageLog:
    """The API's lines about Redis errors: the first one, then at most one every
    EVERY_SECS counting those between. A Redis BUSY or down for minutes answers every call of
    every agent with a 503; a line each would bury the log (the worker says as little:
    workers/outage.py)."""

    EVERY_SECS = 30.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.said_at = float("-inf")
        self.unsaid = 0

    def failed(self, where: str, exc: Exception) -> None:
        now = self.clock()
        if now - self.said_at < self.EVERY_SECS:
            self.unsaid += 1
            return
        more = f" ({self.unsaid} more since the last line)" if self.unsaid else ""
        log.error("redis error on %s: %s%s", where, exc, more)
        self.said_at, self.unsaid = now, 0


OUTAGE_LOG = OutageLog()


def _unavailable(exc: Exception, where: str) -> Reply:
    OUTAGE_LOG.failed(where, exc)
    return 503, "store unavailable", dict(SOON)


REPLIES: dict[type[Exception], Replier] = {
    HTTPError: _http_error,
    InvalidInput: _status(400),
    RegistryError: _soon,
    StoreNotReady: _soon,
    LayoutChanged: _soon,
    StagedPartLost: _soon,
    NoHealthyNodes: _status(503),
    JobNotFound: _status(404),
    JobNotRunning: _status(404),
    NodeNotFound: _status(404),
    Unauthorized: _status(401),
    Forbidden: _status(403),
    OutsideNamespace: _status(403),
    TooManyNodes: _status(503),
    ServiceNotFound: _status(404),
    TooManyServices: _status(503),
    ScheduleNotFound: _status(404),
    KeyNotFound: _status(404),
    TooManySchedules: _status(503),
    Conflict: _status(409),
    IdempotencyMismatch: _status(422),
    OverQuota: _status(429),  # no Retry-After: the lockout's 429 has one (guesses.too_many)
    ReplicasNotAcked: _not_acked,
    RedisError: _unavailable,
    ClientDisconnect: _client_gone,
}


def is_expected(exc: Exception) -> bool:
    """Whether `exc` has a reply (reply_for), without making it (a reply may log)."""
    return any(cls in REPLIES for cls in type(exc).__mro__)


def reply_for(exc: Exception, where: str) -> Reply | None:
    """The reply to `exc`, as Starlette picks a handler: the nearest class in its MRO that
    has one. None for an exception nothing expects (a bug: the caller answers 500)."""
    for cls in type(exc).__mro__:
        replier = REPLIES.get(cls)
        if replier is not None:
            return replier(exc, where)
    return None


def _handler(replier: Replier) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handle(request: Request, exc: Exception) -> Response:
        return text_error(*replier(exc, f"{request.method} {request.url.path}"))

    return handle


async def _unauthorized(request: Request, exc: Exception) -> Response:
    """A wrong credential (or none): 401, counted against the client's address when the call
    sent one; 429 past the limit (guesses.py). The lane answers it with the same call."""
    return text_error(*await credentials(request).refused_asgi(request.scope))


def exception_handlers() -> dict[type[Exception] | int, Callable[..., object]]:
    """REPLIES as Starlette exception handlers; Unauthorized counted (_unauthorized)."""
    handlers: dict[type[Exception] | int, Callable[..., object]] = {
        cls: _handler(replier) for cls, replier in REPLIES.items()
    }
    return {**handlers, Unauthorized: _unauthorized}

"""What both clients share (blocking.py, aio.py): their settings, the retry policy, how an
httpx request is made of a plan's `Request` and its failures told to the plan, and how an
operation of ops.py becomes a method with its name, docstring and signature."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Self, TypedDict, TypeVar, Unpack

import httpx

from scheduler.client.errors import SchedulerError
from scheduler.client.retrying import Policy
from scheduler.client.session import with_session_key
from scheduler.client.steps import Lost, NotSent, Now, PolicyAsk, Reply, Request
from scheduler.config import Settings

DEFAULT_URL = "http://127.0.0.1:9001"  # `scheduler serve`'s and `scheduler up`'s
DEFAULT_TIMEOUT_SECS = 5.0
DEFAULT_RETRIES = 3
DEFAULT_RETRY_PAUSE_SECS = 0.5  # before the first retry, doubled before each next
# What the request never left with: a retry cannot do anything twice.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# What no try would send: a header httpx refuses (a newline in an Idempotency-Key), a URL
# that is not http(s). The call's error at once, never a retry.
_UNSENDABLE = (httpx.LocalProtocolError, httpx.UnsupportedProtocol)


def headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def timeout(base: httpx.Timeout, extra_read: float) -> httpx.Timeout:
    read = None if base.read is None else base.read + extra_read
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


def from_env() -> tuple[str, str, float]:
    """(SCHEDULER_URL, its key, HTTP_TIMEOUT_SECS) as the CLI reads them."""
    settings = Settings.from_env()
    settings = with_session_key(settings, settings.scheduler_url)
    return settings.scheduler_url, settings.api_key, settings.http_timeout_secs


def stream_timeout(base: httpx.Timeout, read_secs: float) -> httpx.Timeout:
    return httpx.Timeout(connect=base.connect, read=read_secs, write=base.write, pool=base.pool)


def build(
    http: httpx.Client | httpx.AsyncClient, request: Request, timeout: httpx.Timeout
) -> httpx.Request:
    return http.build_request(
        request.method,
        request.path,
        params=request.params,
        content=request.json,
        headers=request.headers,
        timeout=timeout,
    )


def reply(response: httpx.Response, body: bytes) -> Reply:
    return Reply(response.status_code, response.headers, body)


def failure(exc: httpx.TransportError, url: str) -> Exception:
    """What a plan is told of a transport error: NotSent or Lost, naming the scheduler; or,
    for a request that cannot be sent at all, the call's error (SchedulerError)."""
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, _UNSENDABLE):
        return SchedulerError(f"cannot send the request to {url}: {reason}")
    return (NotSent if isinstance(exc, _NOT_SENT) else Lost)(f"at {url}: {reason}")


def _signature(op: Callable[..., Any], answer: str) -> inspect.Signature:
    """`op`'s signature as a method's (`self` first), answering `answer` (for help())."""
    sig = inspect.signature(op)
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return sig.replace(parameters=[self, *sig.parameters.values()], return_annotation=answer)


F = TypeVar("F", bound=Callable[..., Any])


def named(method: F, op: Callable[..., Any], kind: str) -> F:
    """The method named and documented as its operation, with its signature (help()):
    `kind` formats what the plan answers (`Iterator[{}]`)."""
    method.__name__ = method.__qualname__ = op.__name__
    method.__doc__ = op.__doc__
    plan = str(inspect.signature(op).return_annotation)  # "Flow[Job]", "Feed[Job]"
    answer = plan[plan.index("[") + 1 : -1] if plan.endswith("]") else plan
    method.__signature__ = _signature(op, kind.format(answer))  # type: ignore[attr-defined]
    return method


class Options(TypedDict, total=False):
    """A client's options: `timeout`, seconds for a connection and each read (a long-poll
    waits longer; default 5); `retries`, how many more times a call is sent when that cannot
    do it twice (retrying.py; default 3); `retry_pause`, seconds before the first retry,
    doubled before each next (default 0.5); `fail_fast`, a scheduler that has not answered
    this client yet and refuses the connection is the call's error at once, not waited for
    (default False; the CLI's, so a command against no scheduler says so at once)."""

    timeout: float
    retries: int
    retry_pause: float
    fail_fast: bool


class Base:
    """What both clients keep: the scheduler's URL, the headers and timeout of each request
    (the subclass makes its httpx client of them) and the retry policy."""

    def __init__(
        self, url: str = DEFAULT_URL, api_key: str = "", **options: Unpack[Options]
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = headers(api_key)
        self.timeout = options.get("timeout", DEFAULT_TIMEOUT_SECS)
        retries = options.get("retries", DEFAULT_RETRIES)
        pause = options.get("retry_pause", DEFAULT_RETRY_PAUSE_SECS)
        self.policy = Policy(tries=retries + 1, first_pause=pause)
        self.fail_fast = options.get("fail_fast", False)
        self.answered = False  # some request of this client has had an answer

    @classmethod
    def from_env(cls, **options: Unpack[Options]) -> Self:
        """A client of the scheduler SCHEDULER_URL names, with TINYAWS_API_KEY and
        HTTP_TIMEOUT_SECS (docs/CONFIGURATION.md); without a key, the one `scheduler up`
        keeps for its session at that address, as the CLI finds it (client/session.py)."""
        url, key, timeout = from_env()
        options.setdefault("timeout", timeout)
        return cls(url, key, **options)

    def _answer(self, step: Now | PolicyAsk) -> Any:
        if isinstance(step, Now):
            return time.monotonic()
        if self.fail_fast and not self.answered:
            return replace(self.policy, retry_not_sent=False)
        return self.policy

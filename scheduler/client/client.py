"""`Client` (blocking) and `AsyncClient` (asyncio): the scheduler's HTTP API from Python
(docs/CLIENT.md). Both carry out the plans of ops.py, where every operation is written once;
each binds an operation as a method (`_returning`, `_iterating`), so the two clients have the
same methods, signatures and docstrings, and a new operation is one function in ops.py and a
line here in each.

    with Client("http://127.0.0.1:9001", api_key) as scheduler:
        job = scheduler.submit("echo hello")
        print(scheduler.wait(job.job_id, timeout=60).stdout)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx

from scheduler.cli.session import with_session_key
from scheduler.client import ops
from scheduler.client.retrying import Policy
from scheduler.client.steps import (
    Exchange,
    Feed,
    Flow,
    Item,
    Lost,
    NotSent,
    Now,
    Open,
    PolicyAsk,
    Read,
    Reply,
    Request,
    Sleep,
    Step,
)
from scheduler.config import Settings

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:9001"  # `scheduler serve`'s and `scheduler up`'s
DEFAULT_TIMEOUT_SECS = 5.0
DEFAULT_RETRIES = 3
DEFAULT_RETRY_PAUSE_SECS = 0.5  # before the first retry, doubled before each next
# What the request never left with: a retry cannot do anything twice.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _timeout(base: httpx.Timeout, extra_read: float) -> httpx.Timeout:
    read = None if base.read is None else base.read + extra_read
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


def _from_env() -> tuple[str, str, float]:
    """(SCHEDULER_URL, its key, HTTP_TIMEOUT_SECS) as the CLI reads them."""
    settings = Settings.from_env()
    settings = with_session_key(settings, settings.scheduler_url)
    return settings.scheduler_url, settings.api_key, settings.http_timeout_secs


def _stream_timeout(base: httpx.Timeout, read_secs: float) -> httpx.Timeout:
    return httpx.Timeout(connect=base.connect, read=read_secs, write=base.write, pool=base.pool)


def _build(
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


def _reply(response: httpx.Response, body: bytes) -> Reply:
    return Reply(response.status_code, response.headers, body)


def _failure(exc: httpx.TransportError, url: str) -> Exception:
    """What a plan is told of a transport error: NotSent or Lost, naming the scheduler."""
    reason = str(exc) or type(exc).__name__
    return (NotSent if isinstance(exc, _NOT_SENT) else Lost)(f"at {url}: {reason}")


def _signature(op: Callable[..., Any], answer: str) -> inspect.Signature:
    """`op`'s signature as a method's (`self` first), answering `answer` (for help())."""
    sig = inspect.signature(op)
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return sig.replace(parameters=[self, *sig.parameters.values()], return_annotation=answer)


def _returning(op: Callable[P, Flow[R]]) -> Callable[Concatenate[Client, P], R]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(op(*args, **kwargs))

    return _named(method, op, "{}")


def _iterating(op: Callable[P, Feed[T]]) -> Callable[Concatenate[Client, P], Iterator[T]]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._loop(op(*args, **kwargs))

    return _named(method, op, "Iterator[{}]")


def _awaited(
    op: Callable[P, Flow[R]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(op(*args, **kwargs))

    return _named(method, op, "Awaitable[{}]")


def _async_iterating(
    op: Callable[P, Feed[T]],
) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[T]]:
    def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        return self._loop(op(*args, **kwargs))

    return _named(method, op, "AsyncIterator[{}]")


F = TypeVar("F", bound=Callable[..., Any])


def _named(method: F, op: Callable[..., Any], kind: str) -> F:
    """The method named and documented as its operation, with its signature (help()):
    `kind` formats what the plan answers (`Iterator[{}]`)."""
    method.__name__ = method.__qualname__ = op.__name__
    method.__doc__ = op.__doc__
    plan = str(inspect.signature(op).return_annotation)  # "Flow[Job]", "Feed[Job]"
    answer = plan[plan.index("[") + 1 : -1] if plan.endswith("]") else plan
    method.__signature__ = _signature(op, kind.format(answer))  # type: ignore[attr-defined]
    return method


class _Base:
    """What both clients keep: the scheduler's URL and the retry policy."""

    def __init__(self, url: str, retries: int, retry_pause: float) -> None:
        self.url = url.rstrip("/")
        self.policy = Policy(tries=retries + 1, first_pause=retry_pause)

    def _answer(self, step: Now | PolicyAsk) -> Any:
        return time.monotonic() if isinstance(step, Now) else self.policy


class Client(_Base):
    """The scheduler's API, blocking. `api_key`: TINYAWS_API_KEY (none for a scheduler
    without one); `timeout`: seconds for a connection and each read (a long-poll waits
    longer); `retries`: how many more times a call is sent when that cannot do it twice
    (retrying.py), `retry_pause` seconds after the first failure, doubled after each next.
    `Client.from_env()` reads SCHEDULER_URL and TINYAWS_API_KEY."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str = "",
        *,
        timeout: float = DEFAULT_TIMEOUT_SECS,
        retries: int = DEFAULT_RETRIES,
        retry_pause: float = DEFAULT_RETRY_PAUSE_SECS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, retries, retry_pause)
        self.http = httpx.Client(
            base_url=self.url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls, **options: Any) -> Client:
        """A client of the scheduler SCHEDULER_URL names, with TINYAWS_API_KEY and
        HTTP_TIMEOUT_SECS (docs/CONFIGURATION.md); without a key, the one `scheduler up`
        keeps for its session at that address, as the CLI finds it (cli/session.py)."""
        url, key, timeout = _from_env()
        return cls(url, key, timeout=options.pop("timeout", timeout), **options)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, plan: Flow[R]) -> R:
        loop: Iterator[None] = self._loop(plan)
        try:
            next(loop)
        except StopIteration as stop:
            value: R = stop.value
            return value
        raise TypeError("an operation that answers once yielded items")

    def _loop(self, plan: Feed[T] | Flow[Any]) -> Iterator[T]:
        """Carries the plan's steps out, yielding its items; returns what it returns."""
        carrier = _Carrier(self)
        answer: Any = None
        failure: Exception | None = None
        try:
            while True:
                try:
                    step = plan.throw(failure) if failure else plan.send(answer)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                answer, failure = None, None
                if isinstance(step, Item):
                    yield step.value
                    continue
                try:
                    answer = carrier.carry_out(step)
                except (NotSent, Lost) as exc:
                    failure = exc
        finally:
            carrier.close_stream()
            plan.close()

    submit = _returning(ops.submit)
    submit_many = _returning(ops.submit_many)
    job = _returning(ops.job)
    jobs = _iterating(ops.jobs)
    watch = _iterating(ops.watch)
    wait = _returning(ops.wait)
    cancel = _returning(ops.cancel)
    retry = _returning(ops.retry)
    retry_many = _returning(ops.retry_many)
    attempts = _returning(ops.attempts)
    logs = _returning(ops.logs)
    follow_logs = _iterating(ops.follow_logs)
    events = _iterating(ops.events)
    nodes = _returning(ops.nodes)
    drain = _returning(ops.drain)
    undrain = _returning(ops.undrain)
    add_schedule = _returning(ops.add_schedule)
    schedules = _iterating(ops.schedules)
    schedule = _returning(ops.schedule)
    pause_schedule = _returning(ops.pause_schedule)
    resume_schedule = _returning(ops.resume_schedule)
    delete_schedule = _returning(ops.delete_schedule)


class _Carrier:
    """One plan's steps, carried out by a Client: its stream is the plan's own, so calls
    from several threads never share one."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.stream: contextlib.ExitStack | None = None
        self.chunks: Iterator[bytes] = iter(())

    def carry_out(self, step: Step) -> Any:
        if isinstance(step, Exchange):
            return self._exchange(step.request)
        if isinstance(step, Open):
            return self._open(step.request, step.read_secs)
        if isinstance(step, Read):
            return self._read()
        if isinstance(step, Sleep):
            time.sleep(step.secs)
            return None
        return self.client._answer(step)

    def _exchange(self, request: Request) -> Reply:
        http = self.client.http
        try:
            response = http.send(_build(http, request, _timeout(http.timeout, request.wait_secs)))
        except httpx.TransportError as exc:
            raise _failure(exc, self.client.url) from None
        return _reply(response, response.content)

    def _open(self, request: Request, read_secs: float) -> Reply:
        self.close_stream()
        http = self.client.http
        opened = contextlib.ExitStack()
        try:
            response = http.send(
                _build(http, request, _stream_timeout(http.timeout, read_secs)), stream=True
            )
            opened.callback(response.close)
            body = response.read() if response.status_code >= 400 else b""
        except httpx.TransportError as exc:
            opened.close()
            raise _failure(exc, self.client.url) from None
        self.stream, self.chunks = opened, response.iter_bytes()
        return _reply(response, body)

    def _read(self) -> bytes:
        try:
            return next(self.chunks, b"")
        except httpx.TransportError as exc:
            raise _failure(exc, self.client.url) from None

    def close_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream, self.chunks = None, iter(())


class AsyncClient(_Base):
    """The scheduler's API for asyncio: `Client`'s methods, awaited (the iterating ones are
    async iterators). `async with AsyncClient(url, key) as scheduler: ...`"""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str = "",
        *,
        timeout: float = DEFAULT_TIMEOUT_SECS,
        retries: int = DEFAULT_RETRIES,
        retry_pause: float = DEFAULT_RETRY_PAUSE_SECS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, retries, retry_pause)
        self.http = httpx.AsyncClient(
            base_url=self.url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls, **options: Any) -> AsyncClient:
        """As Client.from_env."""
        url, key, timeout = _from_env()
        return cls(url, key, timeout=options.pop("timeout", timeout), **options)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _run(self, plan: Flow[R]) -> R:
        returned: list[R] = []
        async for _ in self._loop(plan, returned):
            raise TypeError("an operation that answers once yielded items")
        return returned[0]

    async def _loop(
        self, plan: Feed[T] | Flow[Any], returned: list[Any] | None = None
    ) -> AsyncIterator[T]:
        """Carries the plan's steps out, yielding its items; what it returns is kept for
        _run (an async generator cannot return a value)."""
        carrier = _AsyncCarrier(self)
        answer: Any = None
        failure: Exception | None = None
        try:
            while True:
                try:
                    step = plan.throw(failure) if failure else plan.send(answer)
                except StopIteration as stop:
                    if returned is not None:
                        returned.append(stop.value)
                    return
                answer, failure = None, None
                if isinstance(step, Item):
                    yield step.value
                    continue
                try:
                    answer = await carrier.carry_out(step)
                except (NotSent, Lost) as exc:
                    failure = exc
        finally:
            await carrier.close_stream()
            plan.close()

    submit = _awaited(ops.submit)
    submit_many = _awaited(ops.submit_many)
    job = _awaited(ops.job)
    jobs = _async_iterating(ops.jobs)
    watch = _async_iterating(ops.watch)
    wait = _awaited(ops.wait)
    cancel = _awaited(ops.cancel)
    retry = _awaited(ops.retry)
    retry_many = _awaited(ops.retry_many)
    attempts = _awaited(ops.attempts)
    logs = _awaited(ops.logs)
    follow_logs = _async_iterating(ops.follow_logs)
    events = _async_iterating(ops.events)
    nodes = _awaited(ops.nodes)
    drain = _awaited(ops.drain)
    undrain = _awaited(ops.undrain)
    add_schedule = _awaited(ops.add_schedule)
    schedules = _async_iterating(ops.schedules)
    schedule = _awaited(ops.schedule)
    pause_schedule = _awaited(ops.pause_schedule)
    resume_schedule = _awaited(ops.resume_schedule)
    delete_schedule = _awaited(ops.delete_schedule)


class _AsyncCarrier:
    """One plan's steps, carried out by an AsyncClient: its stream is the plan's own, so
    concurrent calls of one client never share one."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.response: httpx.Response | None = None
        self.chunks: AsyncIterator[bytes] | None = None

    async def carry_out(self, step: Step) -> Any:
        if isinstance(step, Exchange):
            return await self._exchange(step.request)
        if isinstance(step, Open):
            return await self._open(step.request, step.read_secs)
        if isinstance(step, Read):
            return await self._read()
        if isinstance(step, Sleep):
            await asyncio.sleep(step.secs)
            return None
        return self.client._answer(step)

    async def _exchange(self, request: Request) -> Reply:
        http = self.client.http
        try:
            response = await http.send(
                _build(http, request, _timeout(http.timeout, request.wait_secs))
            )
        except httpx.TransportError as exc:
            raise _failure(exc, self.client.url) from None
        return _reply(response, response.content)

    async def _open(self, request: Request, read_secs: float) -> Reply:
        await self.close_stream()
        http = self.client.http
        try:
            request_ = _build(http, request, _stream_timeout(http.timeout, read_secs))
            response = await http.send(request_, stream=True)
            self.response = response
            body = await response.aread() if response.status_code >= 400 else b""
        except httpx.TransportError as exc:
            await self.close_stream()
            raise _failure(exc, self.client.url) from None
        self.chunks = response.aiter_bytes()
        return _reply(response, body)

    async def _read(self) -> bytes:
        if self.chunks is None:
            return b""
        try:
            return await anext(self.chunks, b"")
        except httpx.TransportError as exc:
            raise _failure(exc, self.client.url) from None

    async def close_stream(self) -> None:
        if self.response is not None:
            await self.response.aclose()
            self.response, self.chunks = None, None

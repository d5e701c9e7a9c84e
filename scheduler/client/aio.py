"""`AsyncClient`: the scheduler's API for asyncio (docs/CLIENT.md), `Client`'s methods awaited
(the iterating ones async iterators): the plans of ops.py carried out with httpx's
AsyncClient, each call with its own stream, so several tasks may share one client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, Unpack

import httpx

from scheduler.client import driving, ops, steps
from scheduler.client.driving import DEFAULT_URL
from scheduler.client.steps import (
    Exchange,
    Feed,
    Flow,
    Item,
    Lost,
    NotSent,
    Open,
    Read,
    Reply,
    Request,
    Sleep,
    Step,
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _awaited(
    op: Callable[P, Flow[R]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(op(*args, **kwargs))

    return driving.named(method, op, "Awaitable[{}]")


def _async_iterating(
    op: Callable[P, Feed[T]],
) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[T]]:
    def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        return self._loop(op(*args, **kwargs))

    return driving.named(method, op, "AsyncIterator[{}]")


class AsyncClient(driving.Base):
    """The scheduler's API for asyncio: `Client`'s methods, awaited (the iterating ones are
    async iterators). `async with AsyncClient(url, key) as scheduler: ...`"""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str = "",
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Unpack[driving.Options],
    ) -> None:
        super().__init__(url, api_key, **options)
        self.http = httpx.AsyncClient(
            base_url=self.url, headers=self.headers, timeout=self.timeout, transport=transport
        )

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
                step = steps.advance(plan, answer, failure)
                if isinstance(step, steps.Done):
                    if returned is not None:
                        returned.append(step.value)
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
    place = _awaited(ops.place)
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
    add_key = _awaited(ops.add_key)
    named_keys = _awaited(ops.named_keys)
    revoke_key = _awaited(ops.revoke_key)
    audit = _awaited(ops.audit)
    set_quota = _awaited(ops.set_quota)
    change_quota = _awaited(ops.change_quota)
    namespaces = _awaited(ops.namespaces)


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
                driving.build(http, request, driving.timeout(http.timeout, request.wait_secs))
            )
        except httpx.TransportError as exc:
            raise driving.failure(exc, self.client.url) from None
        self.client.answered = True
        return driving.reply(response, response.content)

    async def _open(self, request: Request, read_secs: float) -> Reply:
        await self.close_stream()
        http = self.client.http
        try:
            request_ = driving.build(http, request, driving.stream_timeout(http.timeout, read_secs))
            response = await http.send(request_, stream=True)
            self.response = response
            body = await response.aread() if response.status_code >= 400 else b""
        except httpx.TransportError as exc:
            await self.close_stream()
            raise driving.failure(exc, self.client.url) from None
        self.chunks = response.aiter_bytes()
        self.client.answered = True
        return driving.reply(response, body)

    async def _read(self) -> bytes:
        if self.chunks is None:
            return b""
        try:
            return await anext(self.chunks, b"")
        except httpx.TransportError as exc:
            raise driving.failure(exc, self.client.url) from None

    async def close_stream(self) -> None:
        if self.response is not None:
            await self.response.aclose()
            self.response, self.chunks = None, None

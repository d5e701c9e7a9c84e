"""`Client`: the scheduler's API from Python, blocking (docs/CLIENT.md). It carries out the
plans of ops.py, where every operation is written once; `_returning` and `_iterating` bind
each as a method, as aio.py binds them for `AsyncClient`, so the two clients have the same
methods, signatures and docstrings.

    with Client("http://127.0.0.1:9001", api_key) as client:
        job = client.submit("echo hello")
        print(client.wait(job.job_id, timeout=60).stdout)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
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


def _returning(op: Callable[P, Flow[R]]) -> Callable[Concatenate[Client, P], R]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(op(*args, **kwargs))

    return driving.named(method, op, "{}")


def _iterating(op: Callable[P, Feed[T]]) -> Callable[Concatenate[Client, P], Iterator[T]]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._loop(op(*args, **kwargs))

    return driving.named(method, op, "Iterator[{}]")


class Client(driving.Base):
    """The scheduler's API, blocking. `api_key`: TINYAWS_API_KEY (none for a scheduler
    without one); `options`: `timeout`, `retries`, `retry_pause` (driving.Options);
    `transport`: httpx's, for tests and proxies. `Client.from_env()` reads SCHEDULER_URL and
    TINYAWS_API_KEY."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str = "",
        *,
        transport: httpx.BaseTransport | None = None,
        **options: Unpack[driving.Options],
    ) -> None:
        super().__init__(url, api_key, **options)
        self.http = httpx.Client(
            base_url=self.url, headers=self.headers, timeout=self.timeout, transport=transport
        )

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
                step = steps.advance(plan, answer, failure)
                if isinstance(step, steps.Done):
                    return step.value  # type: ignore[no-any-return]
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
    place = _returning(ops.place)
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
    add_key = _returning(ops.add_key)
    named_keys = _returning(ops.named_keys)
    revoke_key = _returning(ops.revoke_key)
    audit = _returning(ops.audit)
    set_quota = _returning(ops.set_quota)
    change_quota = _returning(ops.change_quota)
    namespaces = _returning(ops.namespaces)


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
            response = http.send(
                driving.build(http, request, driving.timeout(http.timeout, request.wait_secs))
            )
        except httpx.TransportError as exc:
            raise driving.failure(exc, self.client.url) from None
        self.client.answered = True
        return driving.reply(response, response.content)

    def _open(self, request: Request, read_secs: float) -> Reply:
        self.close_stream()
        http = self.client.http
        opened = contextlib.ExitStack()
        try:
            response = http.send(
                driving.build(http, request, driving.stream_timeout(http.timeout, read_secs)),
                stream=True,
            )
            opened.callback(response.close)
            body = response.read() if response.status_code >= 400 else b""
        except httpx.TransportError as exc:
            opened.close()
            raise driving.failure(exc, self.client.url) from None
        self.stream, self.chunks = opened, response.iter_bytes()
        self.client.answered = True
        return driving.reply(response, body)

    def _read(self) -> bytes:
        try:
            return next(self.chunks, b"")
        except httpx.TransportError as exc:
            raise driving.failure(exc, self.client.url) from None

    def close_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream, self.chunks = None, iter(())

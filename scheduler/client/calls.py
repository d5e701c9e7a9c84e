"""What the operations (ops.py) are made of: a request sent and its answer read, a path's
parts quoted, the parameters given, and plans run inside plans (a wait inside a watch, the
events of a follow), each of their steps passed on to the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec

from scheduler.client.errors import SchedulerError, api_error
from scheduler.client.retrying import send
from scheduler.client.sse import Event
from scheduler.client.steps import Done, Feed, Flow, Item, Reply, Request, Step, advance

T = TypeVar("T")
U = TypeVar("U")

PAGE = 1000  # a listing's page: the API's default


encode = msgspec.json.encode


def path(*parts: str) -> str:
    """A path of `parts`, each one segment whatever it holds: `/` quoted, and `.` and `..`
    too, which a URL library would otherwise resolve (`/jobs/..` is `/`)."""
    return "".join("/" + _segment(part) for part in parts)


def _segment(part: str) -> str:
    quoted = quote(part, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def given(**params: str) -> dict[str, str]:
    return {name: value for name, value in params.items() if value}


def decoded(kind: type[T]) -> Callable[[Reply], T]:
    """An answer's reader: the error it is (4xx, 5xx), else its JSON as `kind`."""
    decoder = msgspec.json.Decoder(kind)

    def read(reply: Reply) -> T:
        if reply.status >= 400:
            raise api_error(reply.status, reply.body, reply.headers)
        try:
            value: T = decoder.decode(reply.body)
        except msgspec.DecodeError as exc:
            raise SchedulerError(f"the scheduler's answer is not as expected: {exc}") from None
        return value

    return read


def call(
    read: Callable[[Reply], T], method: str, path: str, repeatable: bool, **request: Any
) -> Flow[T]:
    reply = yield from send(Request(method, path, **request), repeatable)
    return read(reply)


def no_content(reply: Reply) -> None:
    if reply.status >= 400:
        raise api_error(reply.status, reply.body, reply.headers)


def last(feed: Feed[T]) -> Flow[T]:
    """A feed's last item, its other steps passed on as they are."""
    seen: list[T] = []
    answer: Any = None
    failure: Exception | None = None
    while True:
        step = advance(feed, answer, failure)
        if isinstance(step, Done):
            return seen[0]
        answer, failure = None, None
        if isinstance(step, Item):
            seen[:] = [step.value]
        else:
            answer, failure = yield from passed_on(step)


def passed_on(step: Step) -> Generator[Step, Any, tuple[Any, Exception | None]]:
    """A step of a plan inside another, passed on to the driver: (what came of it, or the
    failure the driver threw in: NotSent, Lost), for the inner plan, which decides whether
    to try again (a failure raised in the outer one would skip its retries)."""
    try:
        return (yield step), None
    except Exception as exc:
        return None, exc


def mapped(
    feed: Feed[Event],
    each: Callable[[Event], list[U]],
    until: Callable[[U], bool] = lambda item: False,
) -> Feed[U]:
    """The items `each` makes of a feed's events, its other steps passed on; it ends after
    an item `until` says is the last."""
    answer: Any = None
    failure: Exception | None = None
    while True:
        step = advance(feed, answer, failure)
        if isinstance(step, Done):
            return
        answer, failure = None, None
        if not isinstance(step, Item):
            answer, failure = yield from passed_on(step)
            continue
        for value in each(step.value):
            yield Item(value)
            if until(value):
                feed.close()
                return


def read_event(read: Callable[[str], T], event: Event) -> T:
    try:
        return read(event.data)
    except msgspec.DecodeError as exc:
        raise SchedulerError(f"the scheduler's {event.name} event is not readable: {exc}") from None

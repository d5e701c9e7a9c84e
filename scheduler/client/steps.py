"""The client's calls as plans: generators that say what to do (`Exchange` a request, `Open`
a stream and `Read` it, `Sleep`, ask the time `NOW` or the retry `POLICY`) and are sent what
came of it. A plan never does I/O itself, so each operation is written once (ops.py) and run
by either driver: `Client` (httpx, blocking) and `AsyncClient` (httpx, asyncio), whose loops
(drive.py) only carry steps out.

A driver answers `Exchange` and `Open` with a `Reply`, or throws `NotSent` (the request never
left: a refused or timed-out connect) or `Lost` (it left, and no whole answer came back) into
the plan, which decides whether sending it again could do a thing twice (retrying.py).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # already quoted
    params: Mapping[str, str] = field(default_factory=dict)
    json: bytes | None = None  # a JSON body
    headers: Mapping[str, str] = field(default_factory=dict)
    # A long-poll's `wait`: the read may take this much longer than the client's timeout.
    wait_secs: float = 0.0


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes  # b"" for an opened stream: its chunks are `Read`


@dataclass(frozen=True, slots=True)
class Exchange:
    """Send `request`, read its whole answer: a Reply."""

    request: Request


@dataclass(frozen=True, slots=True)
class Open:
    """Send `request` and read its answer's head: a Reply whose body is read by `Read`
    steps. Opening another stream closes the one before; the driver closes the last."""

    request: Request
    read_secs: float  # a read of the stream waits this long before it is Lost


@dataclass(frozen=True, slots=True)
class Read:
    """The opened stream's next bytes; b"" once it has ended."""


@dataclass(frozen=True, slots=True)
class Sleep:
    secs: float


@dataclass(frozen=True, slots=True)
class Now:
    """The driver's monotonic clock, in seconds."""


@dataclass(frozen=True, slots=True)
class PolicyAsk:
    """The driver's retry policy (retrying.Policy)."""


@dataclass(frozen=True, slots=True)
class Item(Generic[T]):
    """A value for the caller of an iterating operation (a listing's job, a stream's event)."""

    value: T


NOW, READ, POLICY = Now(), Read(), PolicyAsk()
Step = Exchange | Open | Read | Sleep | Now | PolicyAsk
# A plan that ends with a value, and one that yields items to its caller as it goes.
Flow = Generator[Step, Any, T]
Feed = Generator[Step | Item[T], Any, None]


class NotSent(Exception):
    """The request never reached the scheduler (a connection refused or not made in time):
    sending it again cannot do anything twice."""


class Lost(Exception):
    """The request was sent, or partly, and no whole answer came back: it may have been done."""


@dataclass(frozen=True, slots=True)
class Done:
    """A plan ended, answering `value`."""

    value: Any


def advance(plan: Generator[Any, Any, Any], answer: Any, failure: Exception | None) -> Any:
    """The plan's next step (a Step, an Item), given what came of the last (or the failure
    to throw in); Done once it has returned."""
    try:
        return plan.throw(failure) if failure else plan.send(answer)
    except StopIteration as stop:
        return Done(stop.value)

"""Long-poll parameters and the wait itself, as Nomad's blocking queries: `wait=S` holds the
request up to S seconds (at most MAX_WAIT_SECS) until there is something to answer
(store/connection/notify.py). Without `wait` a request is answered at once, as the
original's was."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import FrameType
from typing import Any, TypeVar

from starlette.requests import Request

from scheduler.api.http import HTTPError, not_one_of
from scheduler.api.params import query_of
from scheduler.models.job import STATUSES
from scheduler.store.connection.notify import MAX_WAIT_SECS, Notifier

T = TypeVar("T")

_SECONDS = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?")


def wait_secs(request: Request) -> float | None:
    """The `wait` parameter: None when absent, else 0 to MAX_WAIT_SECS seconds (400 else)."""
    query = query_of(request)
    if not query.given("wait"):
        return None
    raw = query.get("wait")  # `wait=` too: a bad wait, not no wait
    if not _SECONDS.fullmatch(raw) or float(raw) > MAX_WAIT_SECS:
        raise HTTPError(400, f"invalid wait: use 0 to {MAX_WAIT_SECS:g} seconds")
    return float(raw)


def status_not(request: Request) -> str:
    query = query_of(request)
    raw = query.get("status_not")
    if query.given("status_not") and raw not in STATUSES:
        raise not_one_of("status_not", STATUSES)
    return raw


async def unless_disconnected(request: Request, waiting: Coroutine[Any, Any, T]) -> T | None:
    """`waiting`'s result, or None once the client has gone (the wait is then cancelled:
    a waiting request must not outlive its client)."""
    task = asyncio.ensure_future(waiting)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        finished, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    return task.result() if task in finished else None


def answer_waits_on_exit(notifiers: Sequence[Notifier]) -> Callable[[], None]:
    """On SIGTERM or SIGINT uvicorn stops accepting, then waits for the running requests: a
    long-poll would hold the shutdown up to its wait, then be cut with a 500. Chained before
    uvicorn's own handler, this answers every waiting request at once. Returns the undo.
    Only the main thread can set signal handlers (not so under a test client)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(sig: int, frame: FrameType | None) -> None:
        for notifier in notifiers:
            loop.call_soon_threadsafe(notifier.close_waits)
        chained = previous[signal.Signals(sig)]
        if callable(chained):
            chained(sig, frame)

    for sig in previous:
        signal.signal(sig, handler)

    def undo() -> None:
        for sig, chained in previous.items():
            signal.signal(sig, chained)

    return undo


async def _disconnected(request: Request) -> None:
    # A GET's (empty) body comes first; the next message is the disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass

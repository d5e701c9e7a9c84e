"""Riding out a Redis outage: retry a Redis call with capped exponential backoff until Redis
answers again. And what an outage of an outside service (SNS) raises in a task rq retries.

A worker that exits on the first ConnectionError turns a 2-second Redis restart into a dead
process (and, under `scheduler up` or honcho, a stopped deployment). The cap keeps the wait
after Redis returns short: the periodic tasks resume within BACKOFF_CAP_SECS of it.

An outage is also a Redis that is up but answers no command: BUSY, while a script or function
runs past busy-reply-threshold (lua-time-limit), for as long as it runs, and LOADING, while a
restarted Redis (or DEBUG RELOAD) reads its data. Neither ran the command, and both end on
their own, so they are waited out as a lost connection is (`redis_unavailable`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("workers.outage")

T = TypeVar("T")

# What a Redis that is down, restarting or unreachable raises; LOADING too (redis-py's
# BusyLoadingError is a ConnectionError). Other Redis errors (a script error, a wrong type)
# are bugs, not outages: they are not retried, BUSY aside (redis_unavailable).
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError)
# BUSY comes as a plain ResponseError, "BUSY Redis is busy running a script. ...", or, from
# a pipeline, with redis-py's "Command # 2 (...) of pipeline caused error: " in front (the
# command's text may hold anything: the reply is what follows the last one). The space
# keeps out BUSYKEY and BUSYGROUP, which are answers to the command itself.
BUSY = "BUSY "
IN_PIPELINE = " of pipeline caused error: "
BACKOFF_FIRST_SECS = 0.25
BACKOFF_CAP_SECS = 2.0
WARN_EVERY_SECS = 30.0  # while Redis stays unavailable: one line this often, not one a call


def redis_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says Redis did not run the call and will again without our doing: down,
    unreachable, LOADING or BUSY (module doc)."""
    if isinstance(exc, REDIS_DOWN):
        return True
    if not isinstance(exc, ResponseError):
        return False
    message = str(exc)
    if message.startswith("Command # "):
        message = message.rpartition(IN_PIPELINE)[2]
    return message.startswith(BUSY)


class Availability:
    """What this process has said about Redis being unavailable: one WARNING when it stops
    answering, one again every WARN_EVERY_SECS while it does not, one INFO when it answers
    again. Shared by every thread that meets the outage (rq's loop, the periodic trigger, a
    task), so a BUSY of minutes is a few lines, not a line per retried call."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.since: float | None = None  # when it stopped answering (None: it answers)
        self.warned_at = 0.0

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            now = self.clock()
            if self.since is None:
                self.since = self.warned_at = now
                log.warning("Redis unavailable during %s (%s); retrying", what, exc)
            elif now - self.warned_at >= WARN_EVERY_SECS:
                self.warned_at = now
                down = now - self.since
                log.warning("Redis still unavailable after %.0f s (%s: %s)", down, what, exc)

    def answered(self, what: str) -> None:
        with self._lock:
            if self.since is not None:
                down = self.clock() - self.since
                self.since = None
                log.info("Redis answers again: %s went through after %.1f s", what, down)


AVAILABILITY = Availability()


def backoff(first: float = BACKOFF_FIRST_SECS, cap: float = BACKOFF_CAP_SECS) -> Iterator[float]:
    """first, 2·first, 4·first, … then cap forever."""
    delay = first
    while True:
        yield delay
        delay = min(cap, delay * 2)


def until_redis_answers(
    what: str,
    call: Callable[[], T],
    give_up: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """`call()`, retried while Redis is unavailable (redis_unavailable). `give_up()` is
    asked before each wait (a stop was requested, say); when it says so, the error is
    raised. Any other error is raised at once."""
    delays = backoff()
    failed = False
    while True:
        try:
            result = call()
        except RedisError as exc:
            if not redis_unavailable(exc) or give_up():
                raise
            failed = True
            AVAILABILITY.failed(what, exc)
            sleep(next(delays))
            continue
        if failed:
            AVAILABILITY.answered(what)
        return result


class RoutineFailure(Exception):
    """An outside service failed as it routinely does (down, or answering an error), and rq
    retries the job. The worker logs it as one line, its message, with no traceback: a WARNING
    per attempt, an ERROR once out of retries (SchedulerWorker.handle_exception). So its
    message names what failed and why; anything else a task raises is a bug, logged by rq
    with its traceback."""

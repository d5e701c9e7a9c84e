"""Riding out a Redis outage: retry a Redis call with capped exponential backoff until Redis
answers again. And what an outage of an outside service (SNS) raises in a task rq retries.

A worker that exits on the first ConnectionError turns a 2-second Redis restart into a dead
process (and, under `scheduler up` or honcho, a stopped deployment). The cap keeps the wait
after Redis returns short: the periodic tasks resume within BACKOFF_CAP_SECS of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("workers.outage")

T = TypeVar("T")

# What a Redis that is down, restarting or unreachable raises. Other Redis errors (a script
# error, a wrong type) are bugs, not outages: they are not retried.
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError)
BACKOFF_FIRST_SECS = 0.25
BACKOFF_CAP_SECS = 2.0


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
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, retried while Redis is down. `give_up()` is asked before each wait (a stop
    was requested, say); when it says so, the outage error is raised."""
    delays = backoff()
    failures = 0
    while True:
        try:
            result = call()
        except REDIS_DOWN as exc:
            if give_up():
                raise
            failures += 1
            delay = next(delays)
            # One warning when the outage starts, then one every ~30 s: not a line a second.
            if failures == 1 or failures % 15 == 0:
                log.warning("Redis unavailable during %s (%s); retrying", what, exc)
            sleep(delay)
            continue
        if failures:
            log.info("Redis is back: %s went through after %d attempt(s)", what, failures + 1)
        return result


class RoutineFailure(Exception):
    """An outside service failed as it routinely does (down, or answering an error), and rq
    retries the job. The worker logs it as one line, its message, with no traceback: a WARNING
    per attempt, an ERROR once out of retries (SchedulerWorker.handle_exception). So its
    message names what failed and why; anything else a task raises is a bug, logged by rq
    with its traceback."""

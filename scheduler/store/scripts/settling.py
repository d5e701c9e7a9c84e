"""The scripts of the endings left to settle (lua/includes/settle.lua): SETTLE_ENDINGS, the
workers' task's piece of bounded work, and CLEAR_ENDINGS, the restore's. Each with its call."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.models.wire import rfc3339
from scheduler.store.scripts.endings import SETTLE_UNITS
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Settled:
    """One SETTLE_ENDINGS call: the units of work it spent (at most the call's), and how many
    endings still have waiters to settle."""

    units: int
    left: int


SETTLE_ENDINGS = Script(
    "SETTLE_ENDINGS",
    "units now stamp",
    lambda reply: Settled(int(reply[0]), int(reply[1])),
)


@dataclass(frozen=True, slots=True)
class Settling:
    """A run of SETTLE_ENDINGS calls (ops.upkeep.settle_endings): how many found work, and
    how many endings it left."""

    calls: int
    left: int


def settle_endings(now: float, units: int = SETTLE_UNITS) -> Call[Settled]:
    return SETTLE_ENDINGS.call(units=units, now=now, stamp=rfc3339(now))


CLEAR_ENDINGS = Script(
    "CLEAR_ENDINGS",
    "batch",
    int,
)


def clear_endings(batch: int) -> Call[int]:
    return CLEAR_ENDINGS.call(batch=batch)

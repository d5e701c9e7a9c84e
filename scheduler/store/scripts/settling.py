"""The scripts of the endings left to settle (endings.py): SETTLE_ENDINGS, the workers' task's
piece of bounded work, and CLEAR_ENDINGS, the restore's. Each with its call."""

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
    """
-- The endings whose waiters are still to settle (K.endings, endings.py), from its head,
-- while `units` last: each waiter of an ending released or failed as the script that ended
-- the job would have (settle_waiter), the endings that fails captured and settled in turn.
-- Returns {units spent, entries left}.
local pace = pace_of(tonumber(units))
while pace.left >= VISIT_UNITS + ENDED_UNITS do
  local head = redis.call("ZRANGE", K.endings, 0, 0)[1]
  if not head then break end
  settle_entry(head, pace, now, stamp)
end
return {tonumber(units) - pace.left, redis.call("ZCARD", K.endings)}
""",
    lambda reply: Settled(int(reply[0]), int(reply[1])),
)


@dataclass(frozen=True, slots=True)
class Settling:
    """A run of SETTLE_ENDINGS calls (SyncJobStore.settle_endings): how many found work, and
    how many endings it left."""

    calls: int
    left: int


def settle_endings(now: float, units: int = SETTLE_UNITS) -> Call[Settled]:
    return SETTLE_ENDINGS.call(units=units, now=now, stamp=rfc3339(now))


CLEAR_ENDINGS = Script(
    "CLEAR_ENDINGS",
    "batch",
    """
-- A restore rebuilds every waiting job's count and dependents from the statuses it restored
-- (snapshot.py REBUILD_WAITING): the endings left to settle from before would count again.
-- `batch` of them dropped with their sets, each of up to MAX_WAITERS waiters: UNLINK frees
-- a large one in the background (a DEL of 500 sets of 1000 held Redis ~100 ms). Returns how
-- many.
local entries = redis.call("ZRANGE", K.endings, 0, tonumber(batch) - 1)
for _, entry in ipairs(entries) do
  redis.call("UNLINK", K.ending_waiters(string.match(entry, "^%S+ (%S+)")))
  redis.call("ZREM", K.endings, entry)
end
return #entries
""",
    int,
)


def clear_endings(batch: int) -> Call[int]:
    return CLEAR_ENDINGS.call(batch=batch)

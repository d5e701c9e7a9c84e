"""The scripts of schedules (models/schedule.py): create, replace (a compare-and-set, for
pause, resume and each firing), delete, the due ones, a page of them by name, and the
snapshot's changed set and restore. Each with its call.

A schedule's record is its JSON in `{P}:schedules`, its name in `{P}:schedules:names` (score
0: pages by name) and, while active, in `{P}:schedules:due` scored by its next tick, so the
firing reads only the schedules that are due, whatever the number stored. Every change adds
the name to `{P}:schedules:dirty` (a deletion too: the snapshot then deletes its row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.store.errors import Conflict, ScheduleNotFound, StoreNotReady, TooManySchedules
from scheduler.store.scripts import codes
from scheduler.store.scripts.script import Call, Script


def _created(reply: int) -> None:
    if reply == codes.NOT_READY:
        raise StoreNotReady()
    if reply == codes.DUPLICATE:
        raise Conflict("schedule already exists")
    if reply == codes.TOO_MANY:
        raise TooManySchedules()


CREATE_SCHEDULE = Script(
    "CREATE_SCHEDULE",
    "name record next_tick max_schedules",
    """
-- A new schedule `name`: its record, due at `next_tick` (epoch s; "0": paused). Refused while
-- the restore marker is missing (the snapshot may hold a schedule of that name), for a name
-- in use and past `max_schedules`. Returns OK | DUPLICATE | TOO_MANY | NOT_READY.
if redis.call("EXISTS", K.initialised) == 0 then return NOT_READY end
if redis.call("HEXISTS", K.schedules, name) == 1 then return DUPLICATE end
if redis.call("HLEN", K.schedules) >= tonumber(max_schedules) then return TOO_MANY end
redis.call("HSET", K.schedules, name, record)
redis.call("ZADD", K.schedule_names, 0, name)
if next_tick ~= "0" then redis.call("ZADD", K.schedules_due, next_tick, name) end
redis.call("SADD", K.schedules_dirty, name)
return OK
""",
    _created,
)


def create_schedule(name: str, record: bytes, next_tick: int, max_schedules: int) -> Call[None]:
    return CREATE_SCHEDULE.call(
        name=name, record=record, next_tick=next_tick, max_schedules=max_schedules
    )


def _replaced(reply: int) -> bool:
    if reply == codes.NOT_FOUND:
        raise ScheduleNotFound()
    return reply == codes.OK


REPLACE_SCHEDULE = Script(
    "REPLACE_SCHEDULE",
    "name old new next_tick",
    """
-- Compare-and-set: schedule `name` becomes `new`, due at `next_tick` ("0": not due, paused or
-- no tick left), only if its record is still `old` byte for byte. A firing that lost a race
-- (another firer settled the tick, an operator paused it) changes nothing. Returns OK |
-- MISMATCH (the record changed) | NOT_FOUND.
local current = redis.call("HGET", K.schedules, name)
if not current then return NOT_FOUND end
if current ~= old then return MISMATCH end
redis.call("HSET", K.schedules, name, new)
if next_tick == "0" then
  redis.call("ZREM", K.schedules_due, name)
else
  redis.call("ZADD", K.schedules_due, next_tick, name)
end
redis.call("SADD", K.schedules_dirty, name)
return OK
""",
    _replaced,
)


def replace_schedule(name: str, old: bytes, new: bytes, next_tick: int) -> Call[bool]:
    """True if replaced, False if the record was no longer `old`."""
    return REPLACE_SCHEDULE.call(name=name, old=old, new=new, next_tick=next_tick)


def _deleted(reply: int) -> None:
    if reply == codes.NOT_FOUND:
        raise ScheduleNotFound()


DELETE_SCHEDULE = Script(
    "DELETE_SCHEDULE",
    "name",
    """
-- Forget schedule `name` (its jobs stay). Returns OK | NOT_FOUND.
if redis.call("HDEL", K.schedules, name) == 0 then return NOT_FOUND end
redis.call("ZREM", K.schedule_names, name)
redis.call("ZREM", K.schedules_due, name)
redis.call("SADD", K.schedules_dirty, name)
return OK
""",
    _deleted,
)


def delete_schedule(name: str) -> Call[None]:
    return DELETE_SCHEDULE.call(name=name)


@dataclass(frozen=True, slots=True)
class Stored:
    """A schedule's name and record, as read."""

    name: str
    record: bytes


def _pairs(reply: list[Any]) -> list[Stored]:
    return [Stored(str(reply[i], "utf-8"), reply[i + 1]) for i in range(0, len(reply), 2)]


DUE_SCHEDULES = Script(
    "DUE_SCHEDULES",
    "now skip limit",
    """
-- The schedules due at `now` (next tick <= now), the earliest first, `limit` of them after the
-- `skip` first (those a firing left due this time: no node for them). Reads only the due
-- entries of the index. Returns {name, record, name, record, ...}.
local names = redis.call("ZRANGEBYSCORE", K.schedules_due, "-inf", now, "LIMIT", skip, limit)
return schedule_pairs(names)
""",
    _pairs,
    read_only=True,
)


def due_schedules(now: float, skip: int, limit: int) -> Call[list[Stored]]:
    return DUE_SCHEDULES.call(now=now, skip=skip, limit=limit)


LIST_SCHEDULES = Script(
    "LIST_SCHEDULES",
    "after limit",
    """
-- A page of schedules by name: `limit` of those whose name sorts after `after` ("": from the
-- first). Returns {name, record, ...}.
local from = after == "" and "-" or "(" .. after
local names = redis.call("ZRANGE", K.schedule_names, from, "+", "BYLEX", "LIMIT", 0, limit)
return schedule_pairs(names)
""",
    _pairs,
    read_only=True,
)


def list_schedules(after: str, limit: int) -> Call[list[Stored]]:
    return LIST_SCHEDULES.call(after=after, limit=limit)


TAKE_DIRTY_SCHEDULES = Script(
    "TAKE_DIRTY_SCHEDULES",
    "",
    """
-- Start a snapshot of the schedules: as TAKE_DIRTY for jobs, the changed names move into the
-- in-flight set (a crashed snapshot's are folded in). Returns the number in flight.
if redis.call("EXISTS", K.schedules_dirty) == 1 then
  if redis.call("EXISTS", K.schedules_dirty_inflight) == 1 then
    redis.call("SUNIONSTORE", K.schedules_dirty_inflight, K.schedules_dirty_inflight,
      K.schedules_dirty)
    redis.call("DEL", K.schedules_dirty)
  else
    redis.call("RENAME", K.schedules_dirty, K.schedules_dirty_inflight)
  end
end
return redis.call("SCARD", K.schedules_dirty_inflight)
""",
    int,
)


def take_dirty_schedules() -> Call[int]:
    return TAKE_DIRTY_SCHEDULES.call()


@dataclass(frozen=True, slots=True)
class RestoredSchedule:
    name: str
    record: bytes
    next_tick: int  # 0: not due (paused)


RESTORE_SCHEDULES = Script(
    "RESTORE_SCHEDULES",
    "mark_dirty *schedules",
    """
-- Put schedules back as the snapshot holds them (a schedule of the same name is replaced):
-- 3 values each, at most 1000 schedules: name, record, next tick ("0": not due). mark_dirty
-- "1": the next snapshot writes them. Returns the number restored.
for i = 1, #schedules, 3 do
  local name, next_tick = schedules[i], schedules[i + 2]
  redis.call("HSET", K.schedules, name, schedules[i + 1])
  redis.call("ZADD", K.schedule_names, 0, name)
  if next_tick == "0" then
    redis.call("ZREM", K.schedules_due, name)
  else
    redis.call("ZADD", K.schedules_due, next_tick, name)
  end
  if mark_dirty == "1" then redis.call("SADD", K.schedules_dirty, name) end
end
return #schedules / 3
""",
    int,
)


def restore_schedules(schedules: Sequence[RestoredSchedule], mark_dirty: bool) -> Call[int]:
    values: list[Any] = []
    for schedule in schedules:
        values += [schedule.name, schedule.record, schedule.next_tick]
    return RESTORE_SCHEDULES.call(mark_dirty="1" if mark_dirty else "0", schedules=values)

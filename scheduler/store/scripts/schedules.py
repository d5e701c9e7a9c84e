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
    "name namespaces",
    _deleted,
)


def delete_schedule(name: str, namespaces: str = "") -> Call[None]:
    """ScheduleNotFound without it, or for one outside `namespaces` (its caller's,
    models/namespace.py scope; "": every namespace), which stays."""
    return DELETE_SCHEDULE.call(name=name, namespaces=namespaces)


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
    _pairs,
    read_only=True,
)


def due_schedules(now: float, skip: int, limit: int) -> Call[list[Stored]]:
    return DUE_SCHEDULES.call(now=now, skip=skip, limit=limit)


LIST_SCHEDULES = Script(
    "LIST_SCHEDULES",
    "after limit",
    _pairs,
    read_only=True,
)


def list_schedules(after: str, limit: int) -> Call[list[Stored]]:
    return LIST_SCHEDULES.call(after=after, limit=limit)


TAKE_DIRTY_SCHEDULES = Script(
    "TAKE_DIRTY_SCHEDULES",
    "",
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
    int,
)


def restore_schedules(schedules: Sequence[RestoredSchedule], mark_dirty: bool) -> Call[int]:
    values: list[Any] = []
    for schedule in schedules:
        values += [schedule.name, schedule.record, schedule.next_tick]
    return RESTORE_SCHEDULES.call(mark_dirty="1" if mark_dirty else "0", schedules=values)

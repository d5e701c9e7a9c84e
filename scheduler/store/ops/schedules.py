"""The schedules' operations (scripts/schedules.py): the deployment's own, on shard 0, which
alone fires them (workers/schedule.py)."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.models.access_key import ANYONE, Principal
from scheduler.models.schedule import Schedule, namespace_of, schedule_decoder, schedule_encoder
from scheduler.store.errors import Conflict, ScheduleNotFound
from scheduler.store.operation import Shard, Steps, home, nested, operation, run, send
from scheduler.store.ops.jobs import whole
from scheduler.store.scripts import listing
from scheduler.store.scripts import schedules as schedule_scripts

CHANGE_TRIES = 5  # a pause or resume racing the firing of the same schedule tries again


@operation(home)
def create_schedule(shard: Shard, schedule: Schedule) -> Steps[None]:
    record = schedule_encoder.encode(schedule)
    limit = shard.settings.max_schedules
    call = schedule_scripts.create_schedule(schedule.name, record, schedule.next_tick, limit)
    yield from run(call)


@operation(home)
def schedule(shard: Shard, name: str) -> Steps[bytes | None]:
    blob: bytes | None = yield from send("HGET", shard.keys.schedules, name)
    return blob


@operation(home)
def list_schedules(shard: Shard, after: str, limit: int) -> Steps[list[schedule_scripts.Stored]]:
    return (yield from run(schedule_scripts.list_schedules(after, limit)))


@operation(home)
def schedule_jobs(shard: Shard, name: str, query: listing.JobQuery) -> Steps[list[bytes]]:
    """A page of the jobs schedule `name` made (LIST of its index: keys.py schedule_jobs),
    as GET /jobs pages: shard 0 holds every job one made; of the namespaces `scope` covers
    (a schedule's jobs are of its namespace: the page is whole, or empty). A schedule is
    listed alone: the query's node_id and status are "" (the API says so)."""
    if query.scope == ():
        return []
    budget = shard.settings.max_page_bytes
    page = yield from run(listing.list_jobs(query, budget, name))
    return (yield from nested(whole(page.jobs)))


@operation(home)
def delete_schedule(shard: Shard, name: str, namespaces: str = "") -> Steps[None]:
    """ScheduleNotFound for one outside `namespaces` too (models/namespace.py scope)."""
    yield from run(schedule_scripts.delete_schedule(name, namespaces))


@operation(home)
def change_schedule(
    shard: Shard, name: str, change: Callable[[Schedule], Schedule], by: Principal = ANYONE
) -> Steps[Schedule]:
    """`change` applied to the schedule as a compare-and-set: read, change, write if it
    is still what was read (a firing may settle a tick in between), tried again then. One
    of a namespace the key `by` is not limited to is not found, and stays as it is."""
    for _ in range(CHANGE_TRIES):
        old = yield from send("HGET", shard.keys.schedules, name)
        if old is None:
            raise ScheduleNotFound()
        schedule = schedule_decoder.decode(old)
        if not by.sees(namespace_of(schedule)):
            raise ScheduleNotFound()
        new = change(schedule)
        call = schedule_scripts.replace_schedule(
            name, old, schedule_encoder.encode(new), new.next_tick
        )
        if (yield from run(call)):
            return new
    raise Conflict("the schedule kept changing; try again")


@operation(home)
def due_schedules(
    shard: Shard, now: float, skip: int, limit: int
) -> Steps[list[schedule_scripts.Stored]]:
    """The schedules due at `now`, `limit` after the first `skip` (scripts/schedules.py)."""
    return (yield from run(schedule_scripts.due_schedules(now, skip, limit)))


@operation(home)
def replace_schedule(
    shard: Shard, name: str, old: bytes, new: bytes, next_tick: int
) -> Steps[bool]:
    """Compare-and-set of a schedule's record; False when it was no longer `old`."""
    return (yield from run(schedule_scripts.replace_schedule(name, old, new, next_tick)))

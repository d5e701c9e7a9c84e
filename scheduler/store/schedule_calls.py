"""The schedules' calls of the API's store (JobStore), apart from its module for size."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TypeVar

from scheduler.config import Settings
from scheduler.models.schedule import Schedule, schedule_decoder, schedule_encoder
from scheduler.store.connection.mux import MuxRedis
from scheduler.store.errors import Conflict, ScheduleNotFound
from scheduler.store.keys import Keys
from scheduler.store.scripts import Call, listing, schedules

T = TypeVar("T")
CHANGE_TRIES = 5  # a pause or resume racing the firing of the same schedule tries again


class ScheduleCalls:
    """Schedules (scripts/schedules.py), on the store's connection."""

    redis: MuxRedis
    settings: Settings
    keys: Keys

    async def run(self, call: Call[T]) -> T:
        raise NotImplementedError

    async def whole(self, heads: builtins.list[bytes]) -> builtins.list[bytes]:
        raise NotImplementedError

    async def create_schedule(self, schedule: Schedule) -> None:
        record = schedule_encoder.encode(schedule)
        limit = self.settings.max_schedules
        await self.run(schedules.create_schedule(schedule.name, record, schedule.next_tick, limit))

    async def schedule(self, name: str) -> bytes | None:
        blob: bytes | None = await self.redis.execute("HGET", self.keys.schedules, name)
        return blob

    async def list_schedules(self, after: str, limit: int) -> builtins.list[schedules.Stored]:
        return await self.run(schedules.list_schedules(after, limit))

    async def schedule_jobs(
        self, name: str, bound: int, limit: int, newest: bool
    ) -> builtins.list[bytes]:
        """A page of the jobs schedule `name` made (LIST of its index: keys.py schedule_jobs),
        as GET /jobs pages. On the schedules' shard (`run`: shard 0 when sharded), which
        alone fires them, so it holds every job one made."""
        budget = self.settings.max_page_bytes
        page = await self.run(listing.list_jobs("", "", bound, limit, budget, newest, name))
        return await self.whole(page.jobs)

    async def delete_schedule(self, name: str) -> None:
        await self.run(schedules.delete_schedule(name))

    async def change_schedule(self, name: str, change: Callable[[Schedule], Schedule]) -> Schedule:
        """`change` applied to the schedule as a compare-and-set: read, change, write if it
        is still what was read (a firing may settle a tick in between), tried again then."""
        for _ in range(CHANGE_TRIES):
            old = await self.schedule(name)
            if old is None:
                raise ScheduleNotFound()
            new = change(schedule_decoder.decode(old))
            call = schedules.replace_schedule(
                name, old, schedule_encoder.encode(new), new.next_tick
            )
            if await self.run(call):
                return new
        raise Conflict("the schedule kept changing; try again")

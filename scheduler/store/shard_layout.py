"""What a sharded store knows of its deployment's layout (store/shards.py): read from shard 0,
recorded there at the first sharded start (scripts/layout.py), and read again when the record
changes (made again after shard 0 lost its data)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scheduler.models.job import job_number
from scheduler.store.errors import LayoutChanged, StoreNotReady
from scheduler.store.scripts import layout
from scheduler.store.scripts.layout import Recorded
from scheduler.store.scripts.services import service_number
from scheduler.store.shards import Layout, Numbering

if TYPE_CHECKING:
    from scheduler.store.jobs import ShardClient


class ShardLayout:
    """The layout of `shards` (shard 0 first), once `ready`."""

    def __init__(self, shards: list[ShardClient]) -> None:
        self.shards = shards
        self.recorded = Recorded()
        self.layout = self.services = Layout(len(shards))
        self.started = False

    async def ready(self) -> ShardLayout:
        """Reads the layout if it was not yet (Redis unreachable at the start): until it is,
        a call that routes an id answers 503. Only shard 0 must answer."""
        if not self.started:
            await self.start()
        return self

    async def start(self) -> None:
        """Reads the record, or makes it at the deployment's first sharded start; refuses
        another shard count; gives each shard its numbering (store/shards.py Numbering)."""
        zero, count = self.shards[0], len(self.shards)
        recorded = layout.recorded_of(await zero.redis.execute("HGETALL", zero.keys.shards))
        if not recorded.count:
            # A restore under way has put back part of shard 0's jobs (its marker comes
            # last): floors found in them could be too low, and RECORD_SHARDS would keep them.
            if not await zero.redis.execute("EXISTS", zero.keys.initialised):
                raise StoreNotReady()
            floors = await self._floors()
            recorded = await zero.call(layout.record_shards(count, *floors, now=time.time()))
        if recorded.count != count:
            raise LayoutChanged(count, recorded.count)
        self.recorded, self.layout = recorded, Layout(count, recorded.floor, recorded.pinned)
        self.services = Layout(count, recorded.service_floor)
        for k, shard in enumerate(self.shards):
            here = shard.here
            here.layout = self.layout
            here.numbering = Numbering(count, k, recorded.counters)
            here.service_numbering = Numbering(count, k, recorded.service_counters)
        self.started = True

    async def refresh(self) -> None:
        """Reads the record again if it is not the one read (one HGET; the live-node check
        calls it once a second): every process then routes the same way after shard 0 lost
        its data and a start recorded it again."""
        zero = self.shards[0]
        since = await zero.redis.execute("HGET", zero.keys.shards, "since")
        if self.started and float(since or 0) != self.recorded.since:
            await self.start()

    async def _floors(self) -> tuple[int, int]:
        """Shard 0's highest job and service numbers that are not a multiple of the count: the
        floors (Layout). At the first sharded start every number is shard 0's and those
        above them are multiples, shard 0's by N mod S too; after a restore into an empty
        Redis (the record lost) the same rule finds the floors again from shard 0's jobs,
        whose numbers since the upgrade are all multiples."""
        zero, count = self.shards[0], len(self.shards)
        job_floor, start = 0, 0
        while not job_floor:
            page = await zero.redis.execute("ZREVRANGE", zero.keys.all_jobs, start, start + 999)
            if not page:
                break
            # Numbers read from the ids: an old snapshot's row that is not job-N (listed
            # first, its score below job-1's) has none, and no shard to floor.
            found = (job_number(str(job_id, "utf-8")) or 0 for job_id in page)
            job_floor = next((n for n in found if n % count), 0)
            start += 1000
        names = await zero.redis.execute("HKEYS", zero.keys.services)
        numbers = (service_number(str(name, "utf-8")) for name in names)
        service_floor = max((n for n in numbers if n and n % count), default=0)
        return job_floor, service_floor

    def job_shard(self, job_id: str) -> int:
        return self.layout.job_shard(job_id)

    def number_shard(self, number: int) -> int:
        return self.layout.number_shard(number)

    def node_shard(self, node_id: str) -> int:
        """A node's shard: shard 0 for one registered before the deployment was sharded."""
        return self.layout.node_shard(node_id)

    def service_shard(self, service_id: str) -> int:
        return self.services.number_shard(service_number(service_id) or 0)

    def upgraded_since(self) -> float:
        """When an unsharded deployment was sharded (0: it was sharded from its start)."""
        return self.recorded.since if self.recorded.floor else 0.0

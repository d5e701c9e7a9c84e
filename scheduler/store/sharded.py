"""The API's store of a deployment spread over SCHEDULER_SHARDS > 1 shards (shards.py): one
JobStore per shard, each on its own connection (a Redis Cluster routes each shard's slot to
its primary), and every call sent to the shard that holds what it is about. A job's calls go
to the shard its id names, a node's (its poll, heartbeat, registration, drain) to the node's;
listings, /metrics, the UI's overview and GET /nodes ask every shard at once and merge.
What is the deployment's alone (UI sessions, failed logins, request metrics, schedules)
lives on shard 0, which `run` reaches. Where a new job goes: `_order` (docs/ARCHITECTURE.md,
Shards)."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TypeVar

from scheduler.config import Settings
from scheduler.models.job import STATUSES, Job, JobUpdate
from scheduler.models.registry import Node, NodeRegistration, Service
from scheduler.nodes.placement import Placement
from scheduler.store.connection.notify import Notifier
from scheduler.store.connection.protocol import Reply
from scheduler.store.errors import ServiceNotFound
from scheduler.store.jobs import JobStore, Moves, Sending
from scheduler.store.merging import merged, merged_search, merged_services, number_of
from scheduler.store.pieces import searched
from scheduler.store.schedule_calls import ScheduleCalls
from scheduler.store.scripts import Call, jobs, listing
from scheduler.store.scripts import drains as drain_scripts
from scheduler.store.scripts import nodes as node_scripts
from scheduler.store.scripts import overview as overview_scripts
from scheduler.store.scripts import series as series_scripts
from scheduler.store.scripts.jobs import NO_DEDUP, Created, Dedup
from scheduler.store.scripts.retry import Retried
from scheduler.store.scripts.services import SERVICE_ID_PREFIX
from scheduler.store.shard_layout import ShardLayout
from scheduler.store.shard_placement import ShardPlacement

T = TypeVar("T")


class ShardedStore(ScheduleCalls):
    """JobStore's methods, over the shards (module docstring); the schedules' are shard 0's
    (ScheduleCalls on its connection and keys)."""

    def __init__(self, shards: list[JobStore], settings: Settings) -> None:
        self.shards = shards
        self.settings = settings
        self.redis, self.keys = shards[0].redis, shards[0].keys  # the schedules' (shard 0)
        self.where = ShardLayout(shards)
        self.placement = ShardPlacement(shards, self.where)

    @property
    def notifiers(self) -> builtins.list[Notifier]:
        return [shard.notifier for shard in self.shards]

    @classmethod
    def connect(cls, settings: Settings) -> ShardedStore:
        count = settings.shards
        return cls([JobStore.connect(settings.for_shard(k)) for k in range(count)], settings)

    async def start(self) -> None:
        """The layout read (shard_layout.py), at the app's start; else on first use."""
        await self.where.start()

    async def aclose(self) -> None:
        await self._each(lambda s: s.aclose())

    async def _each(self, call: Callable[[JobStore], Awaitable[T]]) -> builtins.list[T]:
        return list(await asyncio.gather(*(call(s) for s in self.shards)))

    async def of_job(self, job_id: str) -> JobStore:
        return self.shards[(await self.where.ready()).job_shard(job_id)]

    async def of_node(self, node_id: str) -> JobStore:
        return self.shards[(await self.where.ready()).node_shard(node_id)]

    async def run(self, call: Call[T]) -> T:
        """A call of the deployment's own state (sessions, logins, request metrics): shard 0."""
        return await self.shards[0].run(call)

    async def create(
        self, job: Job, placement: Placement, now: float, dedup: Dedup = NO_DEDUP
    ) -> Created:
        async def make(store: JobStore, here: Placement) -> Created:
            return await store.create(job, here, now, dedup)

        if dedup.key:
            return await self.placement.keyed(job, placement, dedup, make)
        return await self.placement.placed(job, placement, make)

    async def pick(self, placement: Placement, now: float) -> str:
        async def make(store: JobStore, here: Placement) -> str:
            return await store.pick(here, now)

        return await self.placement.placed(None, placement, make)

    async def whole(self, heads: builtins.list[bytes]) -> builtins.list[bytes]:
        """As JobStore.whole; a head's parts apart are on its job's shard."""
        if not heads:
            return []
        by_shard: dict[int, builtins.list[int]] = {}
        where = await self.where.ready()
        for i, head in enumerate(heads):
            by_shard.setdefault(where.number_shard(number_of(head)), []).append(i)
        done = list(heads)
        wholes = await asyncio.gather(
            *(self.shards[k].whole([heads[i] for i in at]) for k, at in by_shard.items())
        )
        for at, records in zip(by_shard.values(), wholes, strict=True):
            for i, record in zip(at, records, strict=True):
                done[i] = record
        return done

    # A node's calls: its shard.

    async def poll(self, node_id: str, caller: str) -> jobs.Polled:
        return await (await self.of_node(node_id)).poll(node_id, caller)

    def send_poll(self, node_id: str, caller: str) -> Sending[jobs.Polled] | None:
        """As JobStore.send_poll; None before the layout is read (the caller awaits `poll`)."""
        if not self.where.started:
            return None
        return self.shards[self.where.node_shard(node_id)].send_poll(node_id, caller)

    async def poll_wait(self, node_id: str, caller: str, wait: float) -> jobs.Polled:
        return await (await self.of_node(node_id)).poll_wait(node_id, caller, wait)

    async def register_node(
        self, reg: NodeRegistration, now: float, who: node_scripts.Registration, token_hash: str
    ) -> tuple[Node, node_scripts.Registered]:
        """MAX_NODES bounds the deployment's nodes, not each shard's: the node's shard may
        hold what the others leave (their counts read now, sent together: a registration is
        rare). A shard that does not answer counts none, so a failover stops no other's."""
        store = await self.of_node(reg.id)
        others = (s.redis.execute("HLEN", s.keys.nodes) for s in self.shards if s is not store)
        held = await asyncio.gather(*others, return_exceptions=True)
        left = who.max_nodes - sum(n for n in held if isinstance(n, int))
        return await store.register_node(
            reg, now, dataclasses.replace(who, max_nodes=left), token_hash
        )

    async def heartbeat(
        self, node_id: str, now: float, caller: str
    ) -> tuple[Node, builtins.list[str]]:
        return await (await self.of_node(node_id)).heartbeat(node_id, now, caller)

    async def check_node_caller(self, node_id: str, caller: str) -> None:
        await (await self.of_node(node_id)).check_node_caller(node_id, caller)

    async def delete_node(self, node_id: str, now: float, caller: str) -> Moves:
        return await (await self.of_node(node_id)).delete_node(node_id, now, caller)

    async def drain_node(
        self,
        node_id: str,
        now: float,
        by: str = "operator",
        *,
        caller: str = "key",
        listed: bool = False,
    ) -> drain_scripts.Drained:
        store = await self.of_node(node_id)
        return await store.drain_node(node_id, now, by, caller=caller, listed=listed)

    async def undrain_node(
        self, node_id: str, *, caller: str = "key", listed: bool = False
    ) -> bool:
        store = await self.of_node(node_id)
        return await store.undrain_node(node_id, caller=caller, listed=listed)

    async def create_service(self, service: Service, caller: str) -> bytes:
        return await (await self.of_node(service.node_id)).create_service(service, caller)

    async def services(self, node_id: str, status: str, caller: str) -> builtins.list[bytes]:
        if node_id:
            return await (await self.of_node(node_id)).services(node_id, status, caller)
        return merged_services(await self._each(lambda s: s.services("", status, caller)))

    async def _of_service(self, service_id: str) -> JobStore:
        return self.shards[(await self.where.ready()).service_shard(service_id)]

    async def service(self, service_id: str) -> bytes | None:
        return await (await self._of_service(service_id)).service(service_id)

    async def set_service_status(self, service_id: str, status: str, caller: str) -> None:
        if not service_id.startswith(SERVICE_ID_PREFIX):
            raise ServiceNotFound()
        store = await self._of_service(service_id)
        await store.set_service_status(service_id, status, caller)

    # A job's calls: the shard its id names.

    async def get(self, job_id: str) -> bytes | None:
        return await (await self.of_job(job_id)).get(job_id)

    def send_get(self, job_id: str) -> Reply | None:
        """As JobStore.send_get; None before the layout is read (the caller awaits `get`)."""
        if not self.where.started:
            return None
        return self.shards[self.where.job_shard(job_id)].send_get(job_id)

    async def get_wait(self, job_id: str, status_not: str, wait: float) -> bytes | None:
        return await (await self.of_job(job_id)).get_wait(job_id, status_not, wait)

    async def attempts(self, job_id: str) -> builtins.list[bytes]:
        return await (await self.of_job(job_id)).attempts(job_id)

    async def report(self, job_id: str, update: JobUpdate, now: float, caller: str) -> bytes:
        return await (await self.of_job(job_id)).report(job_id, update, now, caller)

    async def check_report(self, job_id: str, caller: str) -> None:
        await (await self.of_job(job_id)).check_report(job_id, caller)

    async def cancel(self, job_id: str, now: float) -> bytes:
        return await (await self.of_job(job_id)).cancel(job_id, now)

    async def retry(
        self, job_ids: builtins.list[str], placement: Placement, now: float
    ) -> builtins.list[Retried]:
        by_shard: dict[int, builtins.list[str]] = {}
        where = await self.where.ready()
        for job_id in job_ids:
            by_shard.setdefault(where.job_shard(job_id), []).append(job_id)
        done: dict[str, Retried] = {}
        for shard, ids in by_shard.items():
            here = self.placement.among(placement, shard) or Placement(placement.mode)
            for retried in await self.shards[shard].retry(ids, here, now):
                done[retried.job_id] = retried
        return [done[job_id] for job_id in job_ids]

    # Listings: every shard's page, merged.

    # A node's jobs are its shard's, but for those made before it came there: on shard 0
    # before the upgrade (a node gone then, or one the record lost, is not kept on shard 0).
    # So a node's listings ask every shard too, but for its queue (its pending jobs, in
    # queue order, not by number), which is its shard's alone.

    async def list(
        self, node_id: str, status: str, bound: int, limit: int, newest: bool = False
    ) -> builtins.list[bytes]:
        if node_id and status == "pending":
            return await (await self.of_node(node_id)).list(node_id, status, bound, limit, newest)
        if status and status not in STATUSES:
            return []
        # Each shard's heads, a share of the bytes each (a page about MAX_PAGE_BYTES whatever
        # S), merged, then only the jobs kept made whole.
        budget = max(1, self.settings.max_page_bytes // len(self.shards))
        call = listing.list_jobs(node_id, status, bound, limit, budget, newest)
        return await self.whole(merged(await self._each(lambda s: s.run(call)), limit, newest))

    async def counts(self, node_id: str) -> builtins.list[int]:
        found = await self._each(lambda s: s.counts(node_id))
        return [sum(column) for column in zip(*found, strict=True)]

    async def search(
        self, node_id: str, status: str, bound: int, needle: str, scan: int, limit: int
    ) -> listing.Found:
        if node_id and status == "pending":
            store = await self.of_node(node_id)
            return await store.search(node_id, status, bound, needle, scan, limit)
        budget = max(1, self.settings.max_page_bytes // len(self.shards))
        pages = await self._each(
            lambda s: searched(s.run, node_id, status, bound, needle, scan, limit, budget)
        )
        found = merged_search(pages, limit)
        return dataclasses.replace(found, jobs=await self.whole(found.jobs))

    async def overview(self) -> overview_scripts.Overview:
        return overview_scripts.merged(await self._each(lambda s: s.overview()))

    async def series(self, first: int, count: int) -> builtins.list[series_scripts.Minute]:
        return series_scripts.merged(await self._each(lambda s: s.series(first, count)))

    async def keep_series(self) -> None:
        await self._each(lambda s: s.keep_series())

    async def nodes(self, now: float) -> dict[str, Node]:
        return {
            k: v for found in await self._each(lambda s: s.nodes(now)) for k, v in found.items()
        }

    async def drains(self) -> dict[str, str]:
        return {k: v for found in await self._each(lambda s: s.drains()) for k, v in found.items()}

    # The deployment's own: shard 0.

    async def add_request_stats(self, deltas: dict[str, float], read: bool) -> dict[str, float]:
        return await self.shards[0].add_request_stats(deltas, read)

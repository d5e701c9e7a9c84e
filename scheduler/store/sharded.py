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
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from scheduler.config import Settings
from scheduler.models.job import Job, JobUpdate, job_number
from scheduler.models.registry import Node, NodeRegistration, Service
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.connection.notify import Notifier
from scheduler.store.connection.protocol import Reply
from scheduler.store.errors import LayoutChanged, ServiceNotFound
from scheduler.store.jobs import JobStore, Moves, Sending
from scheduler.store.merging import merged, merged_search, number_of
from scheduler.store.schedule_calls import ScheduleCalls
from scheduler.store.scripts import Call, jobs, layout, listing
from scheduler.store.scripts import nodes as node_scripts
from scheduler.store.scripts import overview as overview_scripts
from scheduler.store.scripts import series as series_scripts
from scheduler.store.scripts.jobs import NO_DEDUP, Created, Dedup
from scheduler.store.scripts.retry import Retried
from scheduler.store.shards import Layout, key_order, node_shard

T = TypeVar("T")
LIVE_CACHE_SECS = 1.0  # how long a process trusts what it learnt of the shards' live nodes


class ShardedStore(ScheduleCalls):
    """JobStore's methods, over the shards (module docstring); the schedules' are shard 0's
    (ScheduleCalls on its connection and keys)."""

    def __init__(self, shards: list[JobStore], settings: Settings) -> None:
        self.shards = shards
        self.settings = settings
        self.redis, self.keys = shards[0].redis, shards[0].keys  # the schedules' (shard 0)
        self.layout = Layout(len(shards))
        self.service_floor = 0
        self.pinned: frozenset[str] = frozenset()
        self.started = False
        self._raised: set[int] = set()  # shards whose counters this process raised
        self._turn = itertools.count()
        self._live: tuple[float, list[int]] = (0.0, [])

    @property
    def notifiers(self) -> builtins.list[Notifier]:
        return [shard.notifier for shard in self.shards]

    @classmethod
    def connect(cls, settings: Settings) -> ShardedStore:
        count = settings.shards
        return cls([JobStore.connect(settings.for_shard(k)) for k in range(count)], settings)

    async def start(self) -> None:
        """Records the layout on shard 0 at the deployment's first sharded start, or reads
        it (scripts/layout.py). Run at the app's start and, while it has not succeeded (Redis
        unreachable then), before any call that routes an id: such calls answer 503 until it
        has. Only shard 0 must answer: another shard's outage stops only its own calls."""
        zero, count = self.shards[0], len(self.shards)
        recorded = layout.recorded_of(await zero.redis.execute("HGETALL", zero.keys.shards))
        if not recorded.count:
            recorded = await zero.run(layout.record_shards(count, *await self._floors()))
        if recorded.count != count:
            raise LayoutChanged(count, recorded.count)
        floor, service_floor = recorded.floor, recorded.service_floor
        self.layout, self.service_floor = Layout(count, floor), service_floor
        self.pinned = recorded.pinned
        self.started = True

    async def _raise(self, shard: int) -> JobStore:
        """Shard `shard`, its counters raised above the floors (once a process), so each
        number it draws routes to it: before it makes a job or a service."""
        store = self.shards[shard]
        if shard not in self._raised:
            await self.ready()
            await store.run(layout.raise_counters(self.layout.floor, self.service_floor))
            self._raised.add(shard)
        return store

    async def _floors(self) -> tuple[int, int]:
        """Shard 0's highest job and service numbers that are not a multiple of the count: the
        floors (Layout). At the first sharded start every number is shard 0's and those
        above them are multiples, shard 0's by N mod S too; after a restore into an empty
        Redis (the record lost) the same rule finds the floors again from shard 0's jobs,
        whose numbers since the upgrade are all multiples."""
        zero, count = self.shards[0], len(self.shards)
        job_floor, start = 0, 0
        while not job_floor:
            page = await zero.redis.execute(
                "ZREVRANGE", zero.keys.all_jobs, start, start + 999, "WITHSCORES"
            )
            if not page:
                break
            job_floor = next((n for n in map(int, page[1::2]) if n % count), 0)
            start += 1000
        names = await zero.redis.execute("HKEYS", zero.keys.services)
        numbers = (job_number("job-" + str(n, "utf-8").removeprefix("svc-")) for n in names)
        service_floor = max((n for n in numbers if n and n % count), default=0)
        return job_floor, service_floor

    async def ready(self) -> Layout:
        if not self.started:
            await self.start()
        return self.layout

    async def aclose(self) -> None:
        await self._each(lambda s: s.aclose())

    async def _each(self, call: Callable[[JobStore], Awaitable[T]]) -> builtins.list[T]:
        return list(await asyncio.gather(*(call(s) for s in self.shards)))

    async def of_job(self, job_id: str) -> JobStore:
        return self.shards[(await self.ready()).job_shard(job_id)]

    def node_shard(self, node_id: str) -> int:
        """A node's shard: shard 0 for one registered before the deployment was sharded."""
        return 0 if node_id in self.pinned else node_shard(node_id, len(self.shards))

    async def of_node(self, node_id: str) -> JobStore:
        await self.ready()
        return self.shards[self.node_shard(node_id)]

    async def run(self, call: Call[T]) -> T:
        """A call of the deployment's own state (sessions, logins, request metrics): shard 0."""
        return await self.shards[0].run(call)

    # Placement of new jobs.

    async def _live_shards(self) -> builtins.list[int]:
        """The shards with a live compute node (cached LIVE_CACHE_SECS); all when none is."""
        now = time.monotonic()
        if now - self._live[0] > LIVE_CACHE_SECS:
            # A shard that does not answer (its primary failing over) counts as none live,
            # so new jobs go to the others meanwhile.
            asked = (s.live_compute(time.time()) for s in self.shards)
            counts = await asyncio.gather(*asked, return_exceptions=True)
            live = [k for k, n in enumerate(counts) if isinstance(n, int) and n]
            self._live = (now, live or list(range(len(self.shards))))
        return self._live[1]

    async def _order(self, job: Job | None, dedup: Dedup) -> builtins.list[int]:
        """The shards to try a new job on, best first: the shard of the jobs it runs after;
        for an idempotency key, the same order at every replay (a shard that passed the job
        on marks the key, so the replay passes on to the shard that made it: create.py); else
        the shards with live nodes in turn, then the others."""
        count, where = len(self.shards), await self.ready()
        if job is not None and job.after:
            homes = {where.job_shard(dep) for dep in job.after}
            if len(homes) > 1:
                raise InvalidInput("after: the jobs it runs after are on different shards")
            return [homes.pop()]
        if dedup.key:
            return key_order(f"{dedup.space}:{dedup.key}", count)
        live = await self._live_shards()
        first = next(self._turn) % len(live)
        rest = [k for k in range(count) if k not in live]
        return live[first:] + live[:first] + rest

    def _among(self, placement: Placement, shard: int) -> Placement | None:
        """`placement` on one shard: its candidates that are the shard's nodes (None: none)."""
        if placement.mode == "live":
            return placement
        mine = tuple(n for n in placement.candidates if self.node_shard(n) == shard)
        return Placement(placement.mode, mine) if mine else None

    async def _placed(
        self, job: Job | None, placement: Placement, dedup: Dedup, make: Callable[..., Any]
    ) -> Any:
        """`make(shard store, placement)` on the first shard that has a node for it; the
        last one tried makes it even without (waiting unplaced, as unsharded)."""
        order = await self._order(job, dedup)
        for i, shard in enumerate(order):
            here = self._among(placement, shard)
            if here is None:
                continue
            try:
                elsewhere = i < len(order) - 1
                return await make(await self._raise(shard), replace(here, elsewhere=elsewhere))
            except NoHealthyNodes:
                continue
        raise NoHealthyNodes()

    async def create(
        self, job: Job, placement: Placement, now: float, dedup: Dedup = NO_DEDUP
    ) -> Created:
        async def make(store: JobStore, here: Placement) -> Created:
            return await store.create(job, here, now, dedup)

        created: Created = await self._placed(job, placement, dedup, make)
        return created

    async def pick(self, placement: Placement, now: float) -> str:
        async def make(store: JobStore, here: Placement) -> str:
            return await store.pick(here, now)

        picked: str = await self._placed(None, placement, NO_DEDUP, make)
        return picked

    async def whole(self, heads: builtins.list[bytes]) -> builtins.list[bytes]:
        """As JobStore.whole; a head's parts apart are on its job's shard."""
        if not heads:
            return []
        by_shard: dict[int, builtins.list[int]] = {}
        where = await self.ready()
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
        if not self.started:
            return None
        return self.shards[self.node_shard(node_id)].send_poll(node_id, caller)

    async def poll_wait(self, node_id: str, caller: str, wait: float) -> jobs.Polled:
        return await (await self.of_node(node_id)).poll_wait(node_id, caller, wait)

    async def register_node(
        self, reg: NodeRegistration, now: float, who: node_scripts.Registration, token_hash: str
    ) -> tuple[Node, node_scripts.Registered]:
        return await (await self.of_node(reg.id)).register_node(reg, now, who, token_hash)

    async def heartbeat(
        self, node_id: str, now: float, caller: str
    ) -> tuple[Node, builtins.list[str]]:
        return await (await self.of_node(node_id)).heartbeat(node_id, now, caller)

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
    ) -> node_scripts.Drained:
        store = await self.of_node(node_id)
        return await store.drain_node(node_id, now, by, caller=caller, listed=listed)

    async def undrain_node(
        self, node_id: str, *, caller: str = "key", listed: bool = False
    ) -> bool:
        store = await self.of_node(node_id)
        return await store.undrain_node(node_id, caller=caller, listed=listed)

    async def create_service(self, service: Service, caller: str) -> bytes:
        await self.ready()
        store = await self._raise(self.node_shard(service.node_id))
        return await store.create_service(service, caller)

    async def services(self, node_id: str, status: str, caller: str) -> builtins.list[bytes]:
        if node_id:
            return await (await self.of_node(node_id)).services(node_id, status, caller)
        found = await self._each(lambda s: s.services("", status, caller))
        return [service for page in found for service in page]

    async def _of_service(self, service_id: str) -> JobStore:
        await self.ready()
        number = job_number("job-" + service_id.removeprefix("svc-")) or 0
        if number <= self.service_floor:
            return self.shards[0]
        return self.shards[number % len(self.shards)]

    async def service(self, service_id: str) -> bytes | None:
        return await (await self._of_service(service_id)).service(service_id)

    async def set_service_status(self, service_id: str, status: str, caller: str) -> None:
        if not service_id.startswith("svc-"):
            raise ServiceNotFound()
        store = await self._of_service(service_id)
        await store.set_service_status(service_id, status, caller)

    # A job's calls: the shard its id names.

    async def get(self, job_id: str) -> bytes | None:
        return await (await self.of_job(job_id)).get(job_id)

    def send_get(self, job_id: str) -> Reply | None:
        """As JobStore.send_get; None before the layout is read (the caller awaits `get`)."""
        if not self.started:
            return None
        return self.shards[self.layout.job_shard(job_id)].send_get(job_id)

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
        where = await self.ready()
        for job_id in job_ids:
            by_shard.setdefault(where.job_shard(job_id), []).append(job_id)
        done: dict[str, Retried] = {}
        for shard, ids in by_shard.items():
            here = self._among(placement, shard) or Placement(placement.mode)
            for retried in await self.shards[shard].retry(ids, here, now):
                done[retried.job_id] = retried
        return [done[job_id] for job_id in job_ids]

    # Listings: every shard's page, merged.

    async def list(
        self, node_id: str, status: str, bound: int, limit: int, newest: bool = False
    ) -> builtins.list[bytes]:
        if node_id:
            return await (await self.of_node(node_id)).list(node_id, status, bound, limit, newest)
        # A share of the budget each, so a page holds about MAX_PAGE_BYTES whatever S.
        budget = max(1, self.settings.max_page_bytes // len(self.shards))
        pages = await self._each(lambda s: s.list("", status, bound, limit, newest, budget))
        return merged(pages, limit, newest, budget)

    async def counts(self, node_id: str) -> builtins.list[int]:
        if node_id:
            return await (await self.of_node(node_id)).counts(node_id)
        found = await self._each(lambda s: s.counts(""))
        return [sum(column) for column in zip(*found, strict=True)]

    async def search(
        self, node_id: str, status: str, bound: int, needle: str, scan: int, limit: int
    ) -> listing.Found:
        if node_id:
            store = await self.of_node(node_id)
            return await store.search(node_id, status, bound, needle, scan, limit)
        found = await self._each(lambda s: s.search("", status, bound, needle, scan, limit))
        return merged_search(found, limit, self.settings.max_page_bytes)

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

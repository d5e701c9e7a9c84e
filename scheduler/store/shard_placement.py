"""Which shard of a sharded deployment a new job is made on (docs/ARCHITECTURE.md, Shards):
the shard of the jobs it runs after; else the shards with live compute nodes in turn, then
the others. Each shard tried but the last answers NO_NODES rather than making the job wait
unplaced (Placement.elsewhere). A job with an idempotency key walks the shards in an order of
the key's own, and each shard it leaves marks the key (create.py ELSEWHERE), even one that
may not hold the job (passed over: PASS_KEY), so a replay passes on to the shard that made
it."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from scheduler.models.job import Job
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.errors import IdempotencyMismatch
from scheduler.store.operation import Op
from scheduler.store.ops.jobs import pass_key
from scheduler.store.ops.nodes import live_compute
from scheduler.store.scripts.create import UNMADE, unmark_key
from scheduler.store.scripts.jobs import Created, Dedup
from scheduler.store.shard_layout import ShardLayout
from scheduler.store.shards import ELSEWHERE, key_order

if TYPE_CHECKING:
    from scheduler.store.jobs import ShardClient

T = TypeVar("T")
LIVE_CACHE_SECS = 1.0  # how long a process trusts what it learnt of the shards' live nodes


class ShardPlacement:
    def __init__(
        self,
        shards: list[ShardClient],
        where: ShardLayout,
        on_shard: Callable[[int, Op[Any]], Awaitable[Any]],
    ) -> None:
        self.shards, self.where, self.on_shard = shards, where, on_shard
        self._turn = itertools.count()
        self._live: tuple[float, list[int]] = (0.0, [])

    async def live_shards(self) -> list[int]:
        """The shards with a live compute node (cached LIVE_CACHE_SECS); all when none is.
        A shard that does not answer (its primary failing over) counts as none live, so new
        jobs go to the others meanwhile. The layout's record is checked with them."""
        now = time.monotonic()
        if now - self._live[0] > LIVE_CACHE_SECS:
            asked = (self.on_shard(k, live_compute(time.time())) for k in range(len(self.shards)))
            # The record's check may fail too (shard 0 failing over): it is tried again then.
            *counts, _ = await asyncio.gather(*asked, self.where.refresh(), return_exceptions=True)
            live = [k for k, n in enumerate(counts) if isinstance(n, int) and n]
            self._live = (now, live or list(range(len(self.shards))))
        return self._live[1]

    async def order(self, job: Job | None) -> list[int]:
        """The shards to try a new job without an idempotency key on, best first (module
        docstring; a keyed one's: `keyed`)."""
        count = len(self.shards)
        home = await self._home(job)
        if home is not None:
            return [home]
        live = await self.live_shards()
        first = next(self._turn) % len(live)
        return live[first:] + live[:first] + [k for k in range(count) if k not in live]

    async def _home(self, job: Job | None) -> int | None:
        """The shard of the jobs `job` runs after, the only one it may be made on (None: it
        runs after none)."""
        if job is None or not job.after:
            return None
        where = await self.where.ready()
        homes = {where.job_shard(dep) for dep in job.after}
        if len(homes) > 1:
            raise InvalidInput("after: the jobs it runs after are on different shards")
        return homes.pop()

    async def _key_walk(self, dedup: Dedup) -> list[int]:
        """The shards an idempotency key's job is looked for and made on, in order."""
        if await self._made_unsharded(dedup):
            return [0]
        return key_order(f"{dedup.space}:{dedup.key}", len(self.shards))

    async def _made_unsharded(self, dedup: Dedup) -> bool:
        """Whether the key made a job before the deployment was sharded (on shard 0 then):
        asked for a key's lifetime after the upgrade, one GET more per keyed create."""
        since = self.where.upgraded_since()
        if not since or time.time() > since + dedup.ttl:
            return False
        seen = await self.shards[0].redis.execute("GET", dedup.redis_key(self.shards[0].keys))
        return seen is not None and seen != ELSEWHERE.encode()

    async def placed(
        self,
        job: Job | None,
        placement: Placement,
        make: Callable[[Placement], Op[T]],
    ) -> T:
        """`make(placement)` run on the first shard that has a node for it; the last one
        tried makes it even without (waiting unplaced, as unsharded)."""
        tried = [
            (shard, here)
            for shard in await self.order(job)
            if (here := self.where.layout.among(placement, shard)) is not None
        ]
        for i, (shard, here) in enumerate(tried):
            try:
                made = make(replace(here, elsewhere=i < len(tried) - 1))
                value: T = await self.on_shard(shard, made)
                return value
            except NoHealthyNodes:
                pass
        raise NoHealthyNodes()

    async def keyed(
        self,
        job: Job,
        placement: Placement,
        dedup: Dedup,
        make: Callable[[Placement], Op[Created]],
    ) -> Created:
        """`placed` for a job with an idempotency key: every shard of the key's walk in turn
        until one holds the key (its job, or a mismatch) or makes the job. Only a shard that
        may hold the job (its home when it runs after others; one with a candidate of
        `placement`) makes it; the others are passed over (PASS_KEY: the key looked up, and
        marked as by a shard with no node for it). So a replay finds the job, and a reuse of
        the key for another request its mismatch, whichever shards may take it then (an
        external registry's nodes changed, another request runs after another shard's
        jobs), as one shard would. Nothing made (every shard answered NO_NODES, or one refused
        the request: `_made_nothing`): the marks this call wrote are taken back (a retry must
        not pass on to shards that made nothing)."""
        walk, home = await self._key_walk(dedup), await self._home(job)
        makers = {
            shard: here
            for shard in walk
            if home in (None, shard)
            and (here := self.where.layout.among(placement, shard)) is not None
        }
        last = max((i for i, shard in enumerate(walk) if shard in makers), default=-1)
        for i, shard in enumerate(walk):
            try:
                op = pass_key(dedup) if shard not in makers else None
                op = op or make(replace(makers[shard], elsewhere=i < last))
                created: Created = await self.on_shard(shard, op)
                return created
            except NoHealthyNodes:
                continue
            except Exception as exc:
                if _made_nothing(exc, passed=shard not in makers):
                    await self._take_back(dedup, _marked(walk, last, i))
                raise
        await self._take_back(dedup, _marked(walk, last, len(walk)))
        raise NoHealthyNodes()

    async def _take_back(self, dedup: Dedup, shards: list[int]) -> None:
        """The key's marks on `shards` deleted while they read ELSEWHERE (UNMARK_KEY): a
        request under the key may have made its job on one since. Best effort, the caller's
        error being the answer: a shard that does not answer keeps its mark (the key's TTL)."""
        unmarks = (self.shards[k].call(unmark_key(dedup)) for k in shards)
        await asyncio.gather(*unmarks, return_exceptions=True)


def _marked(walk: list[int], last: int, before: int) -> list[int]:
    """The shards a keyed create marked among the first `before` of its `walk`: each but the
    last that may make the job (index `last`), which runs without Placement.elsewhere and so
    never marks (what its key holds is another request's)."""
    return [shard for i, shard in enumerate(walk[:before]) if i != last]


def _made_nothing(exc: Exception, passed: bool) -> bool:
    """Whether a keyed create that failed with `exc` on a shard (`passed`: passed over, PASS_KEY)
    made no job: a refusal that makes nothing (create.py UNMADE), or any failure of a pass,
    which never makes one (every shard before it answered NO_NODES). Not IdempotencyMismatch:
    the key's job is there, and the marks before it send its replays on to it. Any other
    failure of a create (Redis gone mid-call) may have made the job: its replay needs them."""
    return not isinstance(exc, IdempotencyMismatch) and (passed or isinstance(exc, UNMADE))

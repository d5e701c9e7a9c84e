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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from scheduler.models.job import Job
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.driving import in_step, tolerated
from scheduler.store.errors import IdempotencyMismatch
from scheduler.store.operation import Home, Op, Placed
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
        value: T = await self._walked(await self._walk(job, placement, make))
        return value

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
        created: Created = await self._walked(await self._keyed_walk(job, placement, dedup, make))
        return created

    async def placed_each(self, items: Sequence[Placed]) -> list[Any]:
        """Each new job's `Placed` (a `placed` or `keyed` of its own), all at once: each round
        sends every job still walking to the shard it tries next, one round trip per shard
        (in step: driving.in_step), so a batch whose shards have nodes for its jobs costs one
        round trip per shard. Each job goes where it would alone: the live shards in turn
        (one turn each), its dependencies' shard, its key's walk. Its value, or its error."""
        # Which shards have live nodes, learnt once before the walks (cached): a thousand
        # walks made at once would each ask every shard.
        await self.live_shards()
        found = await asyncio.gather(*map(self._item_walk, items), return_exceptions=True)
        walks: list[Walk | Exception] = tolerated(list(found))
        # A job no shard has a candidate for answers NO_NODES (as `placed`); the others their
        # walk's end.
        values: list[Any] = [w if isinstance(w, Exception) else NoHealthyNodes() for w in walks]
        at = dict.fromkeys((i for i, w in enumerate(walks) if isinstance(w, Walk) and w.tries), 0)
        while at:
            by_shard: dict[int, list[int]] = {}
            for i, n in at.items():
                by_shard.setdefault(cast(Walk, walks[i]).tries[n].shard, []).append(i)
            sent = [
                self.on_shard(k, in_step_op([cast(Walk, walks[i]).tries[at[i]].op for i in ids]))
                for k, ids in by_shard.items()
            ]
            answers = await asyncio.gather(*sent, return_exceptions=True)
            moved, undone = {}, []
            for ids, answer in zip(by_shard.values(), answers, strict=True):
                got = answer if isinstance(answer, list) else [answer] * len(ids)
                for i, value in zip(ids, got, strict=True):
                    walk, n = cast(Walk, walks[i]), at[i]
                    if isinstance(value, NoHealthyNodes) and n + 1 < len(walk.tries):
                        moved[i] = n + 1
                        continue
                    values[i] = tolerated([value])[0]
                    if isinstance(value, Exception):
                        undone.append(self._undo(walk, n, value))
            await asyncio.gather(*undone)
            at = moved
        return values

    async def _item_walk(self, item: Placed) -> Walk:
        if item.dedup is not None and item.dedup.key:
            return await self._keyed_walk(item.job, item.placement, item.dedup, item.make)
        return await self._walk(item.job, item.placement, item.make)

    async def _walk(
        self, job: Job | None, placement: Placement, make: Callable[[Placement], Op[Any]]
    ) -> Walk:
        """An unkeyed job's tries: the shards of `order` with a candidate of `placement`,
        each but the last answering NO_NODES rather than making it unplaced."""
        here = self.where.layout.among
        tried = [(k, p) for k in await self.order(job) if (p := here(placement, k)) is not None]
        last = len(tried) - 1
        return Walk(
            [Try(k, make(replace(p, elsewhere=i < last))) for i, (k, p) in enumerate(tried)]
        )

    async def _keyed_walk(
        self, job: Job, placement: Placement, dedup: Dedup, make: Callable[[Placement], Op[Any]]
    ) -> Walk:
        """A keyed job's tries (`keyed`): every shard of the key's walk, a pass over those
        that may not make it."""
        walk, home = await self._key_walk(dedup), await self._home(job)
        makers = {
            shard: here
            for shard in walk
            if home in (None, shard)
            and (here := self.where.layout.among(placement, shard)) is not None
        }
        last = max((i for i, shard in enumerate(walk) if shard in makers), default=-1)
        tries = [
            Try(k, make(replace(makers[k], elsewhere=i < last)))
            if k in makers
            else Try(k, pass_key(dedup), passes=True)
            for i, k in enumerate(walk)
        ]
        return Walk(tries, dedup, last)

    async def _walked(self, walk: Walk) -> Any:
        """A walk's tries in turn until one answers other than NO_NODES."""
        for n, attempt in enumerate(walk.tries):
            try:
                return await self.on_shard(attempt.shard, attempt.op)
            except NoHealthyNodes as exc:
                if n + 1 < len(walk.tries):
                    continue
                await self._undo(walk, n, exc)
                raise
            except Exception as exc:
                await self._undo(walk, n, exc)
                raise
        raise NoHealthyNodes()

    async def _undo(self, walk: Walk, n: int, exc: Exception) -> None:
        """After a keyed walk failed at its `n`-th try with `exc`: the marks it wrote taken
        back when nothing was made (every try answered NO_NODES, or one refused the request:
        `_made_nothing`)."""
        if walk.dedup is None:
            return
        if isinstance(exc, NoHealthyNodes) and n + 1 == len(walk.tries):
            await self._take_back(walk.dedup, walk.marked(len(walk.tries)))
        elif _made_nothing(exc, passed=walk.tries[n].passes):
            await self._take_back(walk.dedup, walk.marked(n))

    async def _take_back(self, dedup: Dedup, shards: list[int]) -> None:
        """The key's marks on `shards` deleted while they read ELSEWHERE (UNMARK_KEY): a
        request under the key may have made its job on one since. Best effort, the caller's
        error being the answer: a shard that does not answer keeps its mark (the key's TTL)."""
        unmarks = (self.shards[k].call(unmark_key(dedup)) for k in shards)
        await asyncio.gather(*unmarks, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Try:
    """A new job's operation on one shard; `passes`: a keyed create's pass (PASS_KEY)."""

    shard: int
    op: Op[Any]
    passes: bool = False


@dataclass(frozen=True, slots=True)
class Walk:
    """A new job's tries, in order; a keyed one's `dedup` and the index of the `last` try
    that may make its job."""

    tries: list[Try]
    dedup: Dedup | None = None
    last: int = -1

    def marked(self, before: int) -> list[int]:
        """The shards a keyed create marked among its first `before` tries: each but the
        last that may make the job, which runs without Placement.elsewhere and so never marks
        (what its key holds is another request's)."""
        return [t.shard for i, t in enumerate(self.tries[:before]) if i != self.last]


def in_step_op(ops: list[Op[Any]]) -> Op[list[Any]]:
    """`ops` run in step on the shard it is sent to (driving.in_step)."""
    return Op(Home(), lambda shard: in_step(shard, ops), "in_step")


def _made_nothing(exc: Exception, passed: bool) -> bool:
    """Whether a keyed create that failed with `exc` on a shard (`passed`: passed over, PASS_KEY)
    made no job: a refusal that makes nothing (create.py UNMADE), or any failure of a pass,
    which never makes one (every shard before it answered NO_NODES). Not IdempotencyMismatch:
    the key's job is there, and the marks before it send its replays on to it. Any other
    failure of a create (Redis gone mid-call) may have made the job: its replay needs them."""
    return not isinstance(exc, IdempotencyMismatch) and (passed or isinstance(exc, UNMADE))

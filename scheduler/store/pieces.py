"""The API's calls that could hold Redis too long in one script, sent in pieces of bounded
work, each piece one script call from where the one before stopped, so Redis answers others
in between (issue 36: no script over about 10 ms, whatever a user built). The answer is the
one a single unbounded call gave. The sharded store sends each shard's pieces."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from scheduler.nodes.placement import Placement
from scheduler.store.scripts import Call, listing, retry
from scheduler.store.scripts import drains as drain_scripts

Run = Callable[[Call[Any]], Awaitable[Any]]

# Jobs one script call moves off a node at most (DRAIN_NODE, DELETE_NODE: about 5 ms, each
# placed as a new job is; fewer when their records are large: life.lua move_each), and that
# one drain request moves in all (a drain again moves more).
MOVE_STEP, DRAIN_MOVES = 200, 1000


async def searched(
    run: Run, node_id: str, status: str, bound: int, needle: str, scan: int, limit: int,
    budget: int,
) -> listing.Found:  # fmt: skip
    """The UI's search page: SEARCH reads at most SEARCH_READ_BYTES of records a call, so a
    page that must look through more calls it again from the last job looked at, until its
    `scan` jobs are looked at, its `limit` found, or the listing ends. Its jobs' heads."""
    jobs: list[bytes] = []
    looked, last, more, where = 0, 0, False, bound
    while True:
        left = max(1, budget - sum(len(job) for job in jobs))
        wanted = limit - len(jobs)
        step = await run(
            listing.search(node_id, status, where, needle, scan - looked, wanted, left)
        )
        jobs += step.jobs
        if step.looked:
            looked, last, more = looked + step.looked, step.last, step.more
        else:
            more = False
        if not more or looked >= scan or len(jobs) >= limit:
            return listing.Found(jobs, looked, last, more)
        where = step.last


async def retried(
    run: Run, job_ids: Sequence[str], placement: Placement, now: float, node_ttl: float
) -> list[retry.Retried]:
    """RETRY_JOBS takes ids in order while its budget lasts: the rest again, until all."""
    done: list[retry.Retried] = []
    while len(done) < len(job_ids):
        done += await run(retry.retry_jobs(job_ids[len(done) :], placement, now, node_ttl))
    return done


async def drained(
    run: Run, node_id: str, by: str, caller: str, listed: bool, now: float, node_ttl: float
) -> drain_scripts.Drained:
    """DRAIN_NODE, up to MOVE_STEP jobs moved a call, until DRAIN_MOVES or a call moves
    none (one out of its units moves fewer): the jobs moved by every call, how many stayed
    and who holds the drain by the last."""
    moved: list[Any] = []
    while True:
        step = min(MOVE_STEP, DRAIN_MOVES - len(moved))
        done = await run(drain_scripts.drain_node(node_id, by, caller, listed, now, node_ttl, step))
        moved += done.moved
        if not done.moved or len(moved) >= DRAIN_MOVES:
            return drain_scripts.Drained(moved, done.stayed, done.by)

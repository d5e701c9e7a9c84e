"""The API's calls that could hold Redis too long in one script, sent in pieces of bounded
work, each piece one script call from where the one before stopped, so Redis answers others
in between (issue 36: no script over about 10 ms, whatever a user built). The answer is the
one a single unbounded call gave. Programs (store/operation.py) of the operations in ops/."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.store.operation import Steps, run
from scheduler.store.scripts import drains as drain_scripts
from scheduler.store.scripts import listing

# Jobs one script call moves off a node at most (DRAIN_NODE, DELETE_NODE: about 5 ms, each
# placed as a new job is; fewer when their records are large: life.lua move_each), and that
# one drain request moves in all (a drain again moves more).
MOVE_STEP, DRAIN_MOVES = 200, 1000


def searched(query: listing.SearchQuery, budget: int) -> Steps[listing.Found]:
    """The UI's search page: SEARCH reads at most SEARCH_READ_BYTES of records a call, so a
    page that must look through more calls it again from the last job looked at, until its
    `scan` jobs are looked at, its `limit` found, or the listing ends. Its jobs' heads; of
    the namespaces `scope` covers only."""
    scan, limit = query.scan, query.jobs.limit
    jobs: list[bytes] = []
    looked, last, more, where = 0, 0, False, query.jobs.bound
    while True:
        left = max(1, budget - sum(len(job) for job in jobs))
        piece = replace(query.jobs, bound=where, limit=limit - len(jobs))
        step = yield from run(listing.search(replace(query, jobs=piece, scan=scan - looked), left))
        jobs += step.jobs
        if step.looked:
            looked, last, more = looked + step.looked, step.last, step.more
        else:
            more = False
        if not more or looked >= scan or len(jobs) >= limit:
            return listing.Found(jobs, looked, last, more)
        where = step.last


def drained(
    node_id: str, by: str, caller: str, listed: bool, now: float, node_ttl: float
) -> Steps[drain_scripts.Drained]:
    """DRAIN_NODE, up to MOVE_STEP jobs moved a call, until DRAIN_MOVES or a call moves
    none (one out of its units moves fewer): the jobs moved by every call, how many stayed
    and who holds the drain by the last."""
    moved: list[Any] = []
    while True:
        step = min(MOVE_STEP, DRAIN_MOVES - len(moved))
        call = drain_scripts.drain_node(node_id, by, caller, listed, now, node_ttl, step)
        done = yield from run(call)
        moved += done.moved
        if not done.moved or len(moved) >= DRAIN_MOVES:
            return drain_scripts.Drained(moved, done.stayed, done.by)

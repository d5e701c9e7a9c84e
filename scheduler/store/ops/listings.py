"""The listings: pages of jobs (GET /jobs, the UI's search), counts, the UI's overview and
the dashboard's minutes, asked of every shard and merged (store/merging.py: a merged page is
the page one shard holding every job would give)."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from scheduler.models.job import STATUSES
from scheduler.models.namespace import Scope
from scheduler.store.merging import merged, merged_search
from scheduler.store.operation import (
    All,
    OnShard,
    Op,
    Route,
    Shard,
    Steps,
    by_node,
    each,
    home,
    nested,
    operation,
    run,
    send,
    together,
)
from scheduler.store.ops.jobs import whole
from scheduler.store.pieces import searched
from scheduler.store.scripts import listing, metrics
from scheduler.store.scripts import overview as overview_scripts
from scheduler.store.scripts import series as series_scripts
from scheduler.store.scripts.listing import JobQuery, SearchQuery

T = TypeVar("T")
SERIES_CHUNK = 60  # the dashboard's minutes one script reads (`series`)


def _budget(shard: Shard) -> int:
    """Each shard's share of a page's bytes (a page is about MAX_PAGE_BYTES whatever S)."""
    return max(1, shard.settings.max_page_bytes // shard.count)


def _queue_of(query: JobQuery) -> bool:
    """A node's pending jobs, in queue order (not by number): its shard's alone."""
    return bool(query.node_id) and query.status == "pending"


def _listed_node(query: JobQuery) -> Route:
    """A node's queue listed: on its node's shard."""
    return by_node(query.node_id)


def _searched_node(query: SearchQuery) -> Route:
    """A node's queue searched: on its node's shard."""
    return by_node(query.jobs.node_id)


@operation(home)
def list_jobs(shard: Shard, query: JobQuery) -> Steps[list[bytes]]:
    """A page of jobs (scripts.listing.LIST): each shard's heads, merged, then only the
    jobs kept made whole; of the namespaces `scope` covers (none: no job, Redis not asked).
    (A node's jobs are its shard's, but for those made before it came there: on shard 0
    before the upgrade; so a node's listings ask every shard too, but for its queue.)"""
    if (query.status and query.status not in STATUSES) or query.scope == ():
        return []
    if _queue_of(query):
        pages = [(yield from nested(_queue_page(query)))]
    else:
        pages = yield from nested(_pages(query))
    heads = pages[0].jobs if len(pages) == 1 else merged(pages, query.limit, query.newest)
    return (yield from nested(whole(heads)))


@operation(_listed_node)
def _queue_page(shard: Shard, query: JobQuery) -> Steps[listing.Page]:
    budget = shard.settings.max_page_bytes  # its shard's page alone
    return (yield from run(listing.list_jobs(query, budget)))


def _flat(parts: list[list[T]]) -> list[T]:
    return [value for part in parts for value in part]


@operation(each(_flat))
def _pages(shard: Shard, query: JobQuery) -> Steps[list[listing.Page]]:
    return [(yield from run(listing.list_jobs(query, _budget(shard))))]


def _sum(found: list[list[int]]) -> list[int]:
    return [sum(column) for column in zip(*found, strict=True)]


@operation(each(_sum))
def counts(shard: Shard, node_id: str, scope: Scope = None) -> Steps[list[int]]:
    """[all jobs, then each status's] of `node_id`'s jobs ("": every node's), or of the
    namespaces `scope` covers (none: zeros, Redis not asked)."""
    if scope == ():
        return [0] * (len(STATUSES) + 1)
    return (yield from run(listing.counts(node_id, STATUSES, scope)))


def _added(found: list[dict[str, list[int]]]) -> dict[str, list[int]]:
    total: dict[str, list[int]] = {}
    for part in found:
        for namespace, counts in part.items():
            had = total.get(namespace)
            total[namespace] = (
                counts if had is None else [a + b for a, b in zip(had, counts, strict=True)]
            )
    return total


@operation(each(_added))
def namespace_counts(shard: Shard, scope: Scope = None) -> Steps[dict[str, list[int]]]:
    """Each namespace `scope` covers (None: every one in use, scripts.listing
    MOST_NAMESPACES at most a shard) holding a job, as stored ("" the default's), with [all
    its jobs, then each status's (STATUSES)]; summed over the shards."""
    if scope == ():
        return {}
    return (yield from run(listing.namespace_counts(STATUSES, scope)))


@operation(home)
def search(shard: Shard, query: SearchQuery) -> Steps[listing.Found]:
    """The UI's search (scripts.listing.SEARCH, in pieces: pieces.py), its jobs' records
    whole: every shard's, merged, but for a node's queue (its shard's); of the namespaces
    `scope` covers (none: nothing found, Redis not asked)."""
    if query.jobs.scope == ():
        return listing.Found([], 0, 0, False)
    if _queue_of(query.jobs):
        found = yield from nested(_queue_found(query))
    else:
        pieces = yield from nested(_found_each(query))
        found = pieces[0] if len(pieces) == 1 else merged_search(pieces, query.jobs.limit)
    return dataclasses.replace(found, jobs=(yield from nested(whole(found.jobs))))


@operation(_searched_node)
def _queue_found(shard: Shard, query: SearchQuery) -> Steps[listing.Found]:
    return (yield from searched(query, shard.settings.max_page_bytes))


@operation(each(_flat))
def _found_each(shard: Shard, query: SearchQuery) -> Steps[list[listing.Found]]:
    return [(yield from searched(query, _budget(shard)))]


@operation(each(overview_scripts.merged))
def overview(shard: Shard) -> Steps[overview_scripts.Overview]:
    """A shard's overview: its counts, and its nodes a piece a round trip, the two scans side
    by side (a deployment of PIECE nodes or fewer: one round trip in all)."""
    here = OnShard(shard.index)
    counted: Op[overview_scripts.Counts] = Op(
        here, lambda _: run(overview_scripts.counts(STATUSES)), "overview.counts"
    )
    scans: list[Op[overview_scripts.Piece]] = [
        Op(here, lambda _, which=which: _scan(which), "overview.scan")  # type: ignore[misc]
        for which in ("seen", "compute")
    ]
    # The counts and the two scans side by side (All: one round trip while each fits one).
    head, *pieces = yield All([counted, *scans])
    last_seen = {k: v for piece in pieces for k, v in piece.last_seen.items()}
    queues = {k: v for piece in pieces for k, v in piece.queues.items()}
    return overview_scripts.Overview(
        last_seen, queues, head.by_status, head.stats, head.outbox, head.drained
    )


def _scan(which: str) -> Steps[overview_scripts.Piece]:
    """Every node of one of NODE_LOADS' scans, as one piece."""
    seen: dict[str, float] = {}
    queues: dict[str, overview_scripts.Queue] = {}
    cursor = "0"
    while True:
        piece = yield from run(overview_scripts.node_loads(which, cursor))
        seen.update(piece.last_seen)
        queues.update(piece.queues)
        cursor = piece.cursor
        if cursor == "0":
            return overview_scripts.Piece(cursor, seen, queues)


@operation(each(series_scripts.merged))
def series(shard: Shard, first: int, count: int) -> Steps[list[series_scripts.Minute]]:
    """The dashboard's `count` minutes from minute number `first` (models/series.py): a
    script per hour, sent together (one round trip), so the day's 1440 minutes (~7 ms of
    Redis) never hold Redis for more than an hour's (~0.3 ms) at a time."""
    hours = [
        series_scripts.read_series(start, min(SERIES_CHUNK, first + count - start))
        for start in range(first, first + count, SERIES_CHUNK)
    ]
    return _flat((yield from together(*hours)))


def _none(_: list[None]) -> None:
    return None


@operation(each(_none))
def keep_series(shard: Shard) -> Steps[None]:
    """SERIES_RETENTION_SECS where the scripts setting a minute's expiry read it."""
    keep = str(int(shard.settings.series_retention_secs))
    yield from send("SET", shard.keys.series_retention, keep)


@operation(home)
def add_request_stats(
    shard: Shard, deltas: dict[str, float], read: bool
) -> Steps[dict[str, float]]:
    """Adds this process's request metrics since its last call to the deployment's; with
    `read`, returns the deployment's sums."""
    return (yield from run(metrics.add_request_stats(deltas, read)))

"""Pages of jobs from a sharded deployment's shards merged into one (store/sharded.py): pure
functions, so a merged page is the page one shard holding every job would give."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from scheduler.models.job import job_number
from scheduler.store.records import head_id
from scheduler.store.scripts import listing


def number_of(head: bytes) -> int:
    return job_number(head_id(head)) or 0


def merged(pages: Sequence[Sequence[bytes]], limit: int, newest: bool, budget: int) -> list[bytes]:
    """The shards' pages of one listing (each asked for `limit` jobs and `budget` bytes) as
    one page, by job number (newest: descending), of at most `limit` jobs. A shard whose page
    may have stopped short of its jobs (it holds `limit` of them, or its bytes reached
    `budget`) bounds the page at its last job: a job of its past that would be skipped, as
    the next page goes on from the merged page's last."""
    sign = -1 if newest else 1
    keyed = [[(sign * number_of(h), h) for h in page] for page in pages]
    cut = [p[-1][0] for p, raw in zip(keyed, pages, strict=True) if p and _full(raw, limit, budget)]
    bound = min(cut, default=None)
    ordered = heapq.merge(*keyed)
    return [head for key, head in itertools.islice(ordered, limit) if bound is None or key <= bound]


def _full(page: Sequence[bytes], limit: int, budget: int) -> bool:
    """Whether a shard's page may have stopped before its last job (a record made whole
    weighs more than the head the script counted: at worst a page shorter than it could)."""
    return len(page) >= limit or sum(map(len, page)) >= budget


def merged_search(found: Sequence[listing.Found], limit: int, budget: int) -> listing.Found:
    """The shards' search pages as one. A shard that looked further back than another found
    jobs the other has not looked at yet: only those newer than the highest point a shard
    with more to look through stopped at are shown, so the next page (from there) skips none
    and repeats none."""
    stops = [f.last for f in found if f.more]
    stop = max(stops, default=0)
    pages = [[h for h in f.jobs if number_of(h) > stop] for f in found]
    jobs_found = merged(pages, limit, True, budget)
    last = stop or min((f.last for f in found if f.last), default=0)
    return listing.Found(
        jobs=jobs_found, looked=sum(f.looked for f in found), last=last, more=bool(stops)
    )

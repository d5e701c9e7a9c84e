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
    """The shards' pages of one listing as one page: by job number (newest: descending), at
    most `limit` jobs and `budget` bytes (at least one job), as one shard's would be."""
    sign = -1 if newest else 1
    keyed = heapq.merge(*([(sign * number_of(h), h) for h in page] for page in pages))
    page: list[bytes] = []
    size = 0
    for _, head in itertools.islice(keyed, limit):
        size += len(head)
        if page and size > budget:
            break
        page.append(head)
    return page


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

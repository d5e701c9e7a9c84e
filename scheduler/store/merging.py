"""Pages of jobs from a sharded deployment's shards merged into one (store/jobs.py): pure
functions, so a merged page is the page one shard holding every job would give."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import msgspec

from scheduler.models.job import job_number
from scheduler.store.records import head_id
from scheduler.store.scripts import listing
from scheduler.store.scripts.services import service_number


def number_of(head: bytes) -> int:
    return job_number(head_id(head)) or 0


def merged(pages: Sequence[listing.Page], limit: int, newest: bool) -> list[bytes]:
    """The shards' pages of one listing (each asked for `limit` jobs: LIST, which says
    whether it left jobs out) as one page, by job number (newest: descending),
    of at most `limit` jobs. A shard whose page may have stopped short of its jobs (it holds
    `limit` of them, or left some out) bounds the page at its last job: a job past it would
    be skipped, as the next page goes on from the merged page's last."""
    sign = -1 if newest else 1
    keyed = [[(sign * number_of(h), h) for h in page.jobs] for page in pages]
    full = [page.cut or len(page.jobs) >= limit for page in pages]
    bound = min((k[-1][0] for k, f in zip(keyed, full, strict=True) if k and f), default=None)
    ordered = itertools.islice(heapq.merge(*keyed), limit)
    return [head for key, head in ordered if bound is None or key <= bound]


def merged_search(found: Sequence[listing.Found], limit: int) -> listing.Found:
    """The shards' search pages as one. A shard that looked further back than another found
    jobs the other has not looked at yet: only those from the highest point a shard with more
    to look through stopped at are shown (that job too: every shard looked at it or past
    it, and the next page goes on from before it), so the next page skips none and repeats
    none; with no shard stopped, all of them (rows that are not job-N, numbered 0, too)."""
    stops = [f.last for f in found if f.more]
    stop = max(stops, default=0)
    pages = [[h for h in f.jobs if number_of(h) >= stop] for f in found]
    jobs_found = merged([listing.Page(page, cut=False) for page in pages], limit, True)
    last = stop or min((f.last for f in found if f.last), default=0)
    return listing.Found(
        jobs=jobs_found, looked=sum(f.looked for f in found), last=last, more=bool(stops)
    )


class _ServiceId(msgspec.Struct):
    id: str


_service_id = msgspec.json.Decoder(_ServiceId)


def service_order(service: bytes) -> int:
    return service_number(_service_id.decode(service).id) or 0


def merged_services(lists: Sequence[list[bytes]]) -> list[bytes]:
    """The shards' lists of services (LIST_SERVICES: each in id order) as one, in id order,
    as one shard lists them."""
    return list(heapq.merge(*lists, key=service_order))

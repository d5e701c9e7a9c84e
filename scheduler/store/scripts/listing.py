"""The listing scripts, each with its call: GET /jobs, GET /jobs/{id}/attempts, and the web
UI's jobs page (its search, its counts per status)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.models.namespace import Scope, scope_text
from scheduler.models.queue_place import NOWHERE, QueuePlace
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.errors import JobNotFound
from scheduler.store.scripts import codes
from scheduler.store.scripts.codes import check_found
from scheduler.store.scripts.replies import blobs
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Page:
    """A page of GET /jobs: its jobs' heads, and whether it left out jobs it was asked for
    (for its bytes, or a record gone meanwhile): a sharded listing's merge must not page
    past its last (store/merging.py)."""

    jobs: list[bytes]
    cut: bool


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Which jobs a listing (LIST) or a search (SEARCH) asks for: of node `node_id` ("": every
    node's) with `status` ("": any), from job-`bound` on (0: from the end it starts at),
    `limit` at most, of the namespaces `scope` covers (models/namespace.py scope); a listing
    oldest first, or with `newest` newest first (a search always goes newest first)."""

    node_id: str
    status: str
    bound: int
    limit: int
    scope: Scope = None
    newest: bool = False


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """The UI's search: of the jobs `jobs` asks for, those whose command holds `needle`
    (ignoring ASCII case), `scan` of them looked through at most."""

    jobs: JobQuery
    needle: str
    scan: int


def _page(reply: list[Any]) -> Page:
    return Page(jobs=blobs(reply[1:]), cut=bool(reply[0]))


def scope_arg(scope: Scope) -> str:
    """A read's namespaces as the listing scripts take them (models/namespace.py scope_text).
    A scope of none is never sent: the read answers nothing without asking Redis."""
    return scope_text(scope)


LIST = Script(
    "LIST",
    "node status schedule scope bound limit budget order",
    _page,
    read_only=True,
)


def list_jobs(query: JobQuery, budget_bytes: int, schedule: str = "") -> Call[Page]:
    """Oldest first from after job-`bound`, or with `newest` newest first from before it
    (0: from the newest); a node's pending jobs in queue order from job-`bound`'s place;
    with `schedule`, the jobs that schedule made (node_id and status ignored); of the
    namespaces `scope` covers only (listing.lua listing_ids)."""
    return LIST.call(
        node=query.node_id,
        status=query.status,
        schedule=schedule,
        scope=scope_arg(query.scope),
        bound=query.bound,
        limit=query.limit,
        budget=budget_bytes,
        order="desc" if query.newest else "asc",
    )


def _attempts(reply: list[Any]) -> list[bytes]:
    check_found(reply[0], JobNotFound)
    return blobs(reply[1:])


ATTEMPTS = Script(
    "ATTEMPTS",
    "job_id namespaces",
    _attempts,
    read_only=True,
)


def attempts(job_id: str, namespaces: str = "") -> Call[list[bytes]]:
    """The job's attempts (JSON each, models.attempt.Attempt); JobNotFound without the job,
    or for a job outside `namespaces` (its caller's, models/namespace.py scope; "": every
    namespace)."""
    return ATTEMPTS.call(job_id=job_id, namespaces=namespaces)


def _queue_place(reply: list[Any]) -> QueuePlace:
    check_found(reply[0], JobNotFound)
    return QueuePlace(ahead=reply[1], queued=reply[2]) if len(reply) == 3 else NOWHERE


QUEUE_PLACE = Script(
    "QUEUE_PLACE",
    "job_id namespaces",
    _queue_place,
    read_only=True,
)


def queue_place(job_id: str, namespaces: str = "") -> Call[QueuePlace]:
    """A pending job's place in the queue it waits in (NOWHERE in none); JobNotFound as
    `attempts`."""
    return QUEUE_PLACE.call(job_id=job_id, namespaces=namespaces)


def _picked(reply: list[Any]) -> str:
    if reply[0] == codes.NO_NODES:
        raise NoHealthyNodes()
    return str(reply[1], "utf-8")


PICK_NODE = Script(
    "PICK_NODE",
    "mode now node_ttl *candidates",
    _picked,
)


def pick_node(placement: Placement, now: float, node_ttl: float) -> Call[str]:
    return PICK_NODE.call(
        mode=placement.mode, now=now, node_ttl=node_ttl, candidates=placement.candidates
    )


# How much of a job's head (or spec kept apart) SEARCH reads first: its command comes before
# any large field, so a short one ends within it.
SEARCH_HEAD_BYTES = 2048
# The record bytes one SEARCH call reads: about 5 ms of Redis (benchmarks/script_bounds.py).
SEARCH_READ_BYTES = 512 << 10


@dataclass(frozen=True, slots=True)
class Found:
    """A search's page (SEARCH): the jobs found, how many jobs were looked through, the
    number of the last one looked at (0: none), where a search of older jobs goes on, and
    whether the listing holds older jobs than those looked through."""

    jobs: list[bytes]
    looked: int
    last: int
    more: bool


def _found(reply: list[Any]) -> Found:
    looked, last, more, *jobs = reply
    return Found(blobs(jobs), int(looked), int(last), bool(more))


SEARCH = Script(
    "SEARCH",
    "node status scope bound needle scan limit budget read",
    _found,
    read_only=True,
)


def search(query: SearchQuery, budget: int, read: int = SEARCH_READ_BYTES) -> Call[Found]:
    """Up to `limit` of the `scan` newest jobs before job-`bound` (0: from the newest) with
    these filters (and of the namespaces `scope` covers) whose command holds `needle`,
    ignoring ASCII case; at most about `read` bytes of records read (store/pieces.py
    searched goes on from the last job looked at)."""
    jobs = query.jobs
    return SEARCH.call(
        node=jobs.node_id,
        status=jobs.status,
        scope=scope_arg(jobs.scope),
        bound=jobs.bound,
        needle=query.needle.encode().lower().decode(),  # ASCII only, as Lua's string.lower
        scan=query.scan,
        limit=jobs.limit,
        budget=budget,
        read=read,
    )


COUNTS = Script(
    "COUNTS",
    "node scope *statuses",
    lambda reply: [int(count) for count in reply],
    read_only=True,
)


def counts(node_id: str, statuses: Sequence[str], scope: Scope = None) -> Call[list[int]]:
    """[all jobs, then each status's] of `node_id`'s jobs ("": every node's), or of the
    namespaces `scope` covers (with no node: the API takes no node with a scope)."""
    return COUNTS.call(node=node_id, scope=scope_arg(scope), statuses=statuses)


# The namespaces /metrics counts at most (those of the set of namespaces in use, keys.py
# namespaces, in SSCAN's order): a bound on the script's work and on the scrape's series.
MOST_NAMESPACES = 1000


def _by_namespace(reply: list[Any], statuses: int) -> dict[str, list[int]]:
    width = statuses + 2
    return {
        str(reply[i], "utf-8"): [int(n) for n in reply[i + 1 : i + width]]
        for i in range(0, len(reply), width)
    }


NAMESPACE_COUNTS = Script(
    "NAMESPACE_COUNTS",
    "scope most *statuses",
    _by_namespace,
    read_only=True,
)


def namespace_counts(statuses: Sequence[str], scope: Scope = None) -> Call[dict[str, list[int]]]:
    """Each namespace `scope` covers (None: those in use, MOST_NAMESPACES at most) that holds
    a job, as stored ("" the default), with [all its jobs, then each status's]."""
    call = NAMESPACE_COUNTS.call(scope=scope_arg(scope), most=MOST_NAMESPACES, statuses=statuses)
    return dataclasses.replace(call, known=(len(statuses),))

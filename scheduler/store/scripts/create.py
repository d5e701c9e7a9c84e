"""A new job's scripts, each with its call: CREATE_JOB, and CREATE_AFTER for one that runs
after others (two scripts, so a plain submit's holds none of the dependencies' Lua). jobs.py,
the request path's module, names them too."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.models.job import MAX_WAITERS, Job, due_of
from scheduler.models.record import Parts, creation_parts, wire
from scheduler.models.wire import InvalidInput, rfc3339
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.errors import IdempotencyMismatch, OverQuota, StagedPartLost, StoreNotReady
from scheduler.store.keys import OTHER_SPACE_KEY, SPACE_KEYS, Keys
from scheduler.store.scripts import codes
from scheduler.store.scripts.script import Call, Script
from scheduler.store.shards import UNSHARDED, Numbering


@dataclass(frozen=True, slots=True)
class Created:
    job: bytes
    duplicate: bool


def _created(reply: list[Any], spec: bytes = b"") -> Created:
    """A create's reply: {OK, head} of the new job, whose `spec` apart (b"": none) the
    caller staged (its call knows it: create_job), or {DUPLICATE, head} of the job made
    before ("": gone; its parts apart are the store's to read: ops.jobs.create)."""
    code = reply[0]
    codes.check_staged(code)
    if code == codes.NOT_READY:
        raise StoreNotReady()
    if code == codes.NO_NODES:
        raise NoHealthyNodes()
    if code == codes.MISMATCH:
        raise IdempotencyMismatch()
    if code == codes.UNKNOWN_AFTER:
        raise InvalidInput(f"invalid after: {str(reply[1], 'utf-8')} is not a job")
    if code == codes.TOO_MANY:
        dep = str(reply[1], "utf-8")
        raise InvalidInput(f"invalid after: {MAX_WAITERS} jobs already wait for {dep}")
    if code == codes.OVER_QUOTA:
        namespace, what, limit, count = reply[1:5]
        raise OverQuota(str(namespace, "utf-8"), str(what, "utf-8"), int(limit), int(count))
    if code == codes.DUPLICATE:
        return Created(job=reply[1], duplicate=True)
    return Created(job=wire(reply[1], spec or None), duplicate=False)


# What a create (or a pass: PASS_KEY) raises when it made nothing and the key holds no job:
# NOT_READY, NO_NODES, NOT_STAGED and the refusals of `after`. Not IdempotencyMismatch: the
# key holds another request's job there.
UNMADE: tuple[type[Exception], ...] = (
    StoreNotReady, NoHealthyNodes, StagedPartLost, InvalidInput, OverQuota
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Dedup:
    """What makes a creation idempotent: the job made under `key` (in `space`: "sqs", an SQS
    message; "submit", a POST /jobs Idempotency-Key) for `ttl` seconds, and the fingerprint
    of the request that made it ("" for SQS, whose key covers the body already)."""

    space: str
    key: str
    ttl: int
    fingerprint: str = ""

    def redis_key(self, keys: Keys) -> str:
        """The key that remembers what `key` made (the scripts': generated.py dedup_key_of)."""
        return SPACE_KEYS.get(self.space, OTHER_SPACE_KEY)(keys, self.key)


NO_DEDUP = Dedup("", "", 0)


@dataclass(frozen=True, slots=True)
class Asks:
    """What a new job asks of its node (docs/GUIDE.md, Placement): the record's cpus, memory_mb and
    node_selector, passed apart so the create script need not decode the record."""

    cpus: int = 0
    memory_mb: int = 0
    node_selector: Mapping[str, str | list[str]] = field(default_factory=dict)


NO_ASKS = Asks()

_ARGV = (
    "fields spec_staged due priority mode now node_ttl dedup_space dedup_key dedup_ttl fingerprint "
    "cpus memory_mb selector shards shard id_floor elsewhere schedule namespace"
)

CREATE_JOB = Script(
    "CREATE_JOB",
    f"{_ARGV} *candidates",
    _created,
)

CREATE_AFTER = Script(
    "CREATE_AFTER",
    f"{_ARGV} after max_waiters stamp *candidates",
    _created,
)


PASS_KEY = Script(
    "PASS_KEY",
    "dedup_space dedup_key dedup_ttl fingerprint",
    _created,
)


def pass_key(dedup: Dedup) -> Call[Created]:
    return PASS_KEY.call(
        dedup_space=dedup.space,
        dedup_key=dedup.key,
        dedup_ttl=dedup.ttl,
        fingerprint=dedup.fingerprint,
    )


UNMARK_KEY = Script(
    "UNMARK_KEY",
    "dedup_space dedup_key",
    lambda reply: reply == 1,
)


def unmark_key(dedup: Dedup) -> Call[bool]:
    return UNMARK_KEY.call(dedup_space=dedup.space, dedup_key=dedup.key)


def create_job(
    record: bytes,
    placement: Placement,
    now: float,
    node_ttl: float,
    dedup: Dedup = NO_DEDUP,
    due: float | None = None,
    priority: int = 0,
    after: Sequence[str] = (),
    asks: Asks = NO_ASKS,
    spec: bytes = b"",
    spec_staged: str = "",
    numbering: Numbering = UNSHARDED,
    schedule: str = "",
    namespace: str = "",
) -> Call[Created]:
    """`record` is the new job's head (models/record.py) without job_id and node_id; `spec`
    its spec stored apart (b"": in the head), staged under the token `spec_staged` (the
    store stages it: ops.jobs.create); `due`, when it is delayed, the epoch of its run_at;
    `priority`, `after` and `asks`, the record's; `numbering`, how the shard it is made on
    draws its number (store/shards.py); `schedule`, the schedule that made it (its index);
    `namespace`, the job's (its indexes)."""
    args: dict[str, Any] = dict(
        fields=_members(record), spec_staged=spec_staged, due="" if due is None else due,
        priority=priority, mode=placement.mode, now=now, node_ttl=node_ttl, dedup_space=dedup.space,
        dedup_key=dedup.key, dedup_ttl=dedup.ttl if dedup.key else 0,
        fingerprint=dedup.fingerprint, candidates=placement.candidates, cpus=asks.cpus,
        memory_mb=asks.memory_mb,
        selector=json.dumps(asks.node_selector) if asks.node_selector else "",
        shards=numbering.count, shard=numbering.index, id_floor=numbering.floor,
        elsewhere=int(placement.elsewhere), schedule=schedule, namespace=namespace,
    )  # fmt: skip
    if not after:
        call = CREATE_JOB.call(**args)
    else:
        after_args = {"after": json.dumps(list(after)), "max_waiters": MAX_WAITERS}
        call = CREATE_AFTER.call(**args, **after_args, stamp=rfc3339(now))
    return dataclasses.replace(call, known=(spec,))


def _members(head: bytes) -> bytes:
    """The members of a head's JSON object, which the script writes into the object it makes
    (its ids first: fragments/new_job.lua `fields`)."""
    if not (head.startswith(b"{") and head.endswith(b"}")):
        raise ValueError(f"not a JSON object: {head[:20]!r}")
    return head[1:-1]


def create_job_of(
    job: Job,
    placement: Placement,
    now: float,
    node_ttl: float,
    dedup: Dedup = NO_DEDUP,
    spec_staged: str = "",
    parts: Parts | None = None,
    numbering: Numbering = UNSHARDED,
) -> Call[Created]:
    """CREATE_JOB for a new job (models.job.stamped): its record and what indexes it; its
    spec, when stored apart (`creation_parts(job).spec`, `parts` if the caller has them),
    staged under `spec_staged`."""
    asks = Asks(job.cpus, job.memory_mb, job.node_selector)
    parts = parts or creation_parts(job)
    if parts.spec and not spec_staged:
        raise ValueError("a spec stored apart must be staged (ops.jobs.create)")
    return create_job(
        parts.head,
        placement,
        now,
        node_ttl,
        dedup,
        due_of(job),
        job.priority,
        job.after,
        asks,
        parts.spec,
        spec_staged,
        numbering,
        job.schedule,
        job.namespace,
    )

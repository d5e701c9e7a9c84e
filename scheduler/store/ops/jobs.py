"""A job's operations: made, polled for, read, reported on, cancelled, retried; and its
record made whole from the heads scripts answer (models/record.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from scheduler.models.job import Job, JobUpdate
from scheduler.models.queue_place import QueuePlace
from scheduler.models.record import record
from scheduler.nodes.placement import Placement
from scheduler.store import records
from scheduler.store.driving import in_step
from scheduler.store.merging import number_of
from scheduler.store.operation import (
    Command,
    OfNode,
    Op,
    Placed,
    Route,
    Shard,
    Steps,
    at_once,
    by_job,
    home,
    nested,
    on_shard,
    operation,
    placed,
    placed_each,
    run,
    send,
    together,
)
from scheduler.store.scripts import Call, listing
from scheduler.store.scripts import create as create_scripts
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts.jobs import NO_DEDUP, Created, Dedup, Polled, Poller
from scheduler.store.scripts.retry import Retried, RetryPolicy, retry_jobs

T = TypeVar("T")


def made_whole(shard: Shard, heads: list[bytes]) -> Steps[list[bytes]]:
    """The records of heads a script on this shard answered, with the parts they keep apart
    (one MGET for them all, only when one does: models/record.py)."""
    places, wanted = records.apart_keys(shard.keys, heads)
    values = (yield from send("MGET", *wanted)) if places else []
    return records.complete(heads, places, values)


@operation(home)
def whole(shard: Shard, heads: list[bytes]) -> Steps[list[bytes]]:
    """As `made_whole`, for heads of any shard: each one's parts apart are on its job's."""
    if not heads:
        return []
    if shard.count == 1:
        return (yield from made_whole(shard, heads))
    by_shard: dict[int, list[int]] = {}
    for i, head in enumerate(heads):
        by_shard.setdefault(shard.layout.number_shard(number_of(head)), []).append(i)
    pieces = [on_shard(k, _whole_here([heads[i] for i in at])) for k, at in by_shard.items()]
    done = list(heads)
    for at, wholes in zip(by_shard.values(), (yield from at_once(pieces)), strict=True):
        for i, whole_record in zip(at, wholes, strict=True):
            done[i] = whole_record
    return done


@operation(home)
def _whole_here(shard: Shard, heads: list[bytes]) -> Steps[list[bytes]]:
    return (yield from made_whole(shard, heads))


def after_staged(staged: records.Staged, call: Call[T]) -> Steps[T]:
    """`call` run right behind the SETs of its staged parts (sent together)."""
    if not staged.values:
        return (yield from run(call))
    sets = [Command(("SET", k, v, "EX", records.STAGED_SECS)) for k, v in staged.values.items()]
    *_, reply = yield from together(*sets, call)
    return reply  # type: ignore[no-any-return]


def _created_whole(shard: Shard, created: Created) -> Steps[Created]:
    """A duplicate's job with its parts apart (a script answers its head)."""
    if not (created.duplicate and created.job):
        return created
    return dataclasses.replace(created, job=(yield from made_whole(shard, [created.job]))[0])


def create(job: Job, placement: Placement, now: float, dedup: Dedup = NO_DEDUP) -> Op[Created]:
    """A new job (models.job.stamped), placed by `placement`: on the shard its route finds
    (`made_on` there)."""
    return placed(_maker(job, now, dedup), placement, job, dedup)


def create_many(
    jobs: Sequence[tuple[Job, Placement, Dedup]], now: float
) -> Op[list[Created | Exception]]:
    """New jobs (a bulk submit, an SQS batch), each (job, placement, dedup) made as `create`
    makes it alone and on the shard it would go to alone (shard_placement.py placed_each),
    the creates of one shard sent in step: one round trip (driving.in_step). Each job's
    Created, or its own error (NoHealthyNodes, InvalidInput of its `after`, ...)."""
    items = [Placed(_maker(j, now, d), p, j, d) for j, p, d in jobs]
    return placed_each(
        items, lambda shard: in_step(shard, [made_on(j, p, now, d) for j, p, d in jobs])
    )


@operation(home)
def claim_batch(shard: Shard, dedup: Dedup) -> Steps[bool]:
    """A bulk submit's Idempotency-Key taken for the batch of `dedup.fingerprint` (a SET NX
    that answers what it found, on shard 0 whatever shards its jobs go to): whether the key
    is this batch's, new or taken by it before (a replay); False for another batch's. Its
    jobs' own keys (each `create_many` job's dedup) then make every job once."""
    key = shard.keys.batch_submission(dedup.key)
    found = yield from send("SET", key, dedup.fingerprint, "NX", "GET", "EX", dedup.ttl)
    return found is None or found in (dedup.fingerprint, dedup.fingerprint.encode())


def _maker(job: Job, now: float, dedup: Dedup) -> Callable[[Placement], Op[Created]]:
    return lambda here: made_on(job, here, now, dedup)


@operation(home)
def made_on(
    shard: Shard, job: Job, placement: Placement, now: float, dedup: Dedup
) -> Steps[Created]:
    ttl = shard.settings.node_ttl_secs
    staged, call = records.creation(shard.keys, job, placement, now, ttl, dedup, shard.numbering)
    created = yield from after_staged(staged, call)
    return (yield from _created_whole(shard, created))


@operation(home)
def pass_key(shard: Shard, dedup: Dedup) -> Steps[Created]:
    """A keyed create's pass over a shard, which may not make its job (create.py PASS_KEY):
    the job the key made here (duplicate), IdempotencyMismatch for another request's, else
    NoHealthyNodes, the key marked as passed on."""
    created = yield from run(create_scripts.pass_key(dedup))  # a job only as a duplicate
    return (yield from _created_whole(shard, created))


def pick(placement: Placement, now: float) -> Op[str]:
    """The node a job placed now would go to (on the shard its route finds: `picked_on`)."""
    return placed(lambda here: picked_on(here, now), placement)


@operation(home)
def picked_on(shard: Shard, placement: Placement, now: float) -> Steps[str]:
    ttl = shard.settings.node_ttl_secs
    return (yield from run(listing.pick_node(placement, now, ttl)))


def by_poller(poller: Poller, *_: Any, **__: Any) -> Route:
    return OfNode(poller.node_id)


@operation(by_poller)
def poll(shard: Shard, poller: Poller) -> Steps[Polled]:
    settings = shard.settings
    limit, steal, builtin = settings.max_jobs_per_node, settings.steals, settings.builtin_registry
    polled = yield from run(job_scripts.poll(poller, limit, steal, builtin))
    polled.jobs = yield from made_whole(shard, polled.jobs)
    return polled


@operation(by_job)
def get(shard: Shard, job_id: str) -> Steps[bytes | None]:
    """The job's record (models/record.py: its parts, one MGET), None when it is not."""
    return record((yield from send("MGET", *records.job_parts(shard.keys, job_id))))


class _Status(msgspec.Struct):
    status: str = ""


_status_decoder = msgspec.json.Decoder(_Status)


def waited(first: bytes | None, status_not: str) -> Callable[[bytes | None], bool]:
    """Whether a wait on a job (JobStore.get_wait) is over at a read of its record."""

    def done(blob: bytes | None) -> bool:
        if blob is None:
            return True
        if status_not:
            return _status_decoder.decode(blob).status != status_not
        return blob != first

    return done


@operation(by_job)
def attempts(shard: Shard, job_id: str, namespaces: str = "") -> Steps[list[bytes]]:
    """The job's ended attempts, oldest first (scripts.listing.ATTEMPTS); JobNotFound for a
    job outside `namespaces` too (models/namespace.py scope)."""
    return (yield from run(listing.attempts(job_id, namespaces)))


@operation(by_job)
def queue_place(shard: Shard, job_id: str, namespaces: str = "") -> Steps[QueuePlace]:
    """A pending job's place in its queue (scripts.listing.QUEUE_PLACE)."""
    return (yield from run(listing.queue_place(job_id, namespaces)))


@operation(by_job)
def report(shard: Shard, job_id: str, update: JobUpdate, now: float, caller: str) -> Steps[bytes]:
    s = shard.settings
    policy, ttl, builtin = RetryPolicy.of(s), s.node_ttl_secs, s.builtin_registry
    staged = records.stage(shard.keys, records.large_outputs(update))
    call = job_scripts.transition(job_id, update, now, policy, caller, ttl, builtin, staged.tokens)
    head = yield from after_staged(staged, call)
    return (yield from made_whole(shard, [head]))[0]


@operation(by_job)
def check_report(shard: Shard, job_id: str, caller: str) -> Steps[None]:
    """Raises as `report` would for an unknown job or a caller that may not report on it."""
    yield from run(job_scripts.check_report(job_id, caller))


@operation(by_job)
def cancel(
    shard: Shard, job_id: str, now: float, by: str = "", namespaces: str = ""
) -> Steps[bytes]:
    """The job cancelled by the key named `by`, limited to `namespaces` (models/namespace.py
    scope: another namespace's job is not found, and stays)."""
    head = yield from run(job_scripts.cancel_job(job_id, now, by, namespaces))
    return (yield from made_whole(shard, [head]))[0]


@operation(home)
def retry(
    shard: Shard,
    job_ids: Sequence[str],
    placement: Placement,
    now: float,
    by: str = "",
    namespaces: str = "",
) -> Steps[list[Retried]]:
    """Failed jobs started over (scripts.retry.RETRY_JOBS), placed as new jobs are, each on
    its own shard (with the placement's nodes there), in calls of bounded work (RETRY_JOBS
    takes ids in order while its budget lasts: the rest go again). Their records whole. A
    job outside `namespaces` (the key's, models/namespace.py scope) is NOT_FOUND."""
    by_shard: dict[int, list[str]] = {}
    for job_id in job_ids:
        by_shard.setdefault(shard.layout.job_shard(job_id), []).append(job_id)
    done: dict[str, Retried] = {}
    for k, ids in by_shard.items():
        here = shard.layout.among(placement, k) or Placement(placement.mode)
        retrying = _retry_here(ids, here, now, by, namespaces)
        for retried in (yield from nested(on_shard(k, retrying))):
            done[retried.job_id] = retried
    return [done[job_id] for job_id in job_ids]


@operation(home)
def _retry_here(
    shard: Shard,
    job_ids: Sequence[str],
    placement: Placement,
    now: float,
    by: str,
    namespaces: str,
) -> Steps[list[Retried]]:
    ttl = shard.settings.node_ttl_secs
    done: list[Retried] = []
    while len(done) < len(job_ids):
        call = retry_jobs(job_ids[len(done) :], placement, now, ttl, by, namespaces)
        done += yield from run(call)
    heads = yield from made_whole(shard, [r.job for r in done if r.job])
    whole_of = dict(zip([r.job_id for r in done if r.job], heads, strict=True))
    return [dataclasses.replace(r, job=whole_of.get(r.job_id, r.job)) for r in done]

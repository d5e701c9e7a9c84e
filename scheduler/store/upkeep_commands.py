"""Script calls of the background work (upkeep_scripts.py): the timeout sweep, pruning,
lost nodes, cancels past their grace, the outbox, the snapshot's dirty set and the restore.
Built like commands.py's: plain values, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.models import rfc3339
from scheduler.store.commands import Call, ids
from scheduler.store.keys import Keys


@dataclass(frozen=True, slots=True)
class Batch:
    """One call of a sweep over an index: how many entries it read, which jobs it changed,
    and how many entries it left in the index for a later sweep."""

    read: int
    ids: list[str]
    kept: int = 0


def _batch(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], ids=ids(reply[1:]))


def _pruned(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], kept=reply[1], ids=ids(reply[2:]))


def sweep_timeouts(keys: Keys, now: float, timeout_secs: float, batch: int) -> Call[Batch]:
    return Call(
        "SWEEP_TIMEOUTS",
        [
            keys.root,
            keys.deadlines,
            keys.dirty,
            keys.outbox,
            keys.event_seq,
            keys.all_jobs,
            keys.finished,
        ],
        [now - timeout_secs, rfc3339(now), batch, now],
        _batch,
    )


def prune_finished(keys: Keys, cutoff: float, skip: int, batch: int) -> Call[Batch]:
    """Remove jobs finished before `cutoff` that the snapshot holds; `skip` entries at the
    head of the index are passed over (jobs a snapshot has not written yet)."""
    return Call(
        "PRUNE_FINISHED",
        [keys.root, keys.finished, keys.all_jobs, keys.dirty, keys.dirty_inflight],
        [cutoff, skip, batch],
        _pruned,
    )


@dataclass(frozen=True, slots=True)
class Requeued:
    job_id: str
    from_node: str
    to_node: str


def _groups(reply: list[bytes], size: int) -> list[list[str]]:
    """A flat script reply of records of `size` fields, as text, one list per record."""
    text = [str(part, "utf-8") for part in reply]
    return [text[i : i + size] for i in range(0, len(text), size)]


def requeued(reply: list[bytes]) -> list[Requeued]:
    return [Requeued(*fields) for fields in _groups(reply, 3)]


def requeue_lost(
    keys: Keys, now: float, lost_secs: float, node_ttl: float, limit: int
) -> Call[list[Requeued]]:
    return Call(
        "REQUEUE_LOST",
        [keys.root, keys.nodes_compute, keys.rr_seq, keys.dirty, keys.all_jobs],
        [now - lost_secs, now - node_ttl, limit],
        requeued,
    )


@dataclass(frozen=True, slots=True)
class Lost:
    """A running job of a lost node, after LOSE_RUNNING: `status` is `pending` (retried or
    a service placed again, on `to_node`) or `failed` (no retry left)."""

    job_id: str
    from_node: str
    to_node: str
    status: str


def _lost(reply: list[bytes]) -> list[Lost]:
    return [Lost(*fields) for fields in _groups(reply, 4)]


def lose_running(
    keys: Keys, now: float, lost_secs: float, node_ttl: float, max_retries: int, limit: int
) -> Call[list[Lost]]:
    return Call(
        "LOSE_RUNNING",
        [
            keys.root,
            keys.nodes_compute,
            keys.rr_seq,
            keys.dirty,
            keys.all_jobs,
            keys.deadlines,
            keys.outbox,
            keys.event_seq,
            keys.finished,
        ],
        [now - lost_secs, now - node_ttl, limit, now, rfc3339(now), max_retries],
        _lost,
    )


def trim_outbox(keys: Keys, handed_over: Sequence[bytes]) -> Call[int]:
    """Drop the outbox entries `handed_over` (read from its head, in order) to rq."""
    return Call("TRIM_OUTBOX", [keys.root, keys.outbox], list(handed_over), int)


# The SQLite snapshot and the restore from it (scheduler/snapshot.py).


def take_dirty(keys: Keys) -> Call[int]:
    return Call("TAKE_DIRTY", [keys.root, keys.dirty, keys.dirty_inflight], [], int)


@dataclass(frozen=True, slots=True)
class RestoredJob:
    """A job to put back: its record and what its indexes need. `started` (epoch s) is set
    for a running run-job only: those are the ones in the busy set and the deadlines.
    `finished` (epoch s) is set for a done or failed job only (the retention index)."""

    job_id: str
    score: float
    node_id: str
    status: str
    started: float | None
    finished: float | None
    record: bytes


def restore_jobs(keys: Keys, jobs: Sequence[RestoredJob], mark_dirty: bool) -> Call[int]:
    args: list[Any] = ["1" if mark_dirty else "0"]
    for job in jobs:
        started = "" if job.started is None else job.started
        finished = "" if job.finished is None else job.finished
        args += [job.job_id, job.score, job.node_id, job.status, started, finished, job.record]
    restore_keys = [
        keys.root,
        keys.all_jobs,
        keys.deadlines,
        keys.dirty,
        keys.finished,
        keys.cancelling,
    ]
    return Call("RESTORE_JOBS", restore_keys, args, int)


def finish_restore(keys: Keys, highest_job_number: int, marker: str) -> Call[None]:
    return Call(
        "FINISH_RESTORE",
        [keys.root, keys.job_seq, keys.initialised, keys.restoring],
        [highest_job_number, marker],
        lambda _: None,
    )


def finish_cancels(keys: Keys, cutoff: float, now: float, batch: int) -> Call[Batch]:
    finish_keys = [
        keys.root,
        keys.cancelling,
        keys.all_jobs,
        keys.dirty,
        keys.outbox,
        keys.event_seq,
        keys.finished,
    ]
    return Call("FINISH_CANCELS", finish_keys, [cutoff, now, rfc3339(now), batch], _batch)

"""The scripts of the background work: the timeout sweep, cancels past their grace, pruning,
the jobs of lost nodes and the event outbox (the snapshot's are in snapshot.py). Each with
its call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.models.wire import rfc3339
from scheduler.store.scripts import retry
from scheduler.store.scripts.replies import Lost, Requeued, ids, lost_jobs, requeued
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Batch:
    """One call of a sweep over an index: how many entries it read, which jobs it changed,
    and how many entries it left in the index for a later sweep."""

    read: int
    ids: list[str]
    kept: int = 0


def _batch(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], ids=ids(reply[1:]))


SWEEP_TIMEOUTS = Script(
    "SWEEP_TIMEOUTS",
    f"cutoff now stamp batch node_ttl builtin {retry.ARGV}",
    _batch,
)


def sweep_timeouts(
    now: float,
    timeout_secs: float,
    batch: int,
    retries: RetryPolicy,
    *,
    node_ttl: float,
    builtin: bool = True,
) -> Call[Batch]:
    return SWEEP_TIMEOUTS.call(
        cutoff=now - timeout_secs,
        now=now,
        stamp=rfc3339(now),
        batch=batch,
        node_ttl=node_ttl,
        builtin="1" if builtin else "0",
        **retries.args(),
    )


FINISH_CANCELS = Script(
    "FINISH_CANCELS",
    "cutoff now stamp batch",
    _batch,
)


def finish_cancels(cutoff: float, now: float, batch: int) -> Call[Batch]:
    return FINISH_CANCELS.call(cutoff=cutoff, now=now, stamp=rfc3339(now), batch=batch)


def _pruned(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], kept=reply[1], ids=ids(reply[2:]))


PRUNE_FINISHED = Script(
    "PRUNE_FINISHED",
    "cutoff skip batch",
    _pruned,
)


def prune_finished(cutoff: float, skip: int, batch: int) -> Call[Batch]:
    """Remove jobs finished before `cutoff` that the snapshot holds; `skip` entries at the
    head of the index are passed over (jobs a snapshot has not written yet)."""
    return PRUNE_FINISHED.call(cutoff=cutoff, skip=skip, batch=batch)


REQUEUE_LOST = Script(
    "REQUEUE_LOST",
    "lost_cutoff live_cutoff limit builtin",
    requeued,
)


def requeue_lost(
    now: float, lost_secs: float, node_ttl: float, limit: int, builtin: bool
) -> Call[list[Requeued]]:
    return REQUEUE_LOST.call(
        lost_cutoff=now - lost_secs,
        live_cutoff=now - node_ttl,
        limit=limit,
        builtin="1" if builtin else "0",
    )


LOSE_RUNNING = Script(
    "LOSE_RUNNING",
    f"lost_cutoff live_cutoff limit now stamp {retry.ARGV}",
    lost_jobs,
)


def lose_running(
    now: float, lost_secs: float, node_ttl: float, retries: RetryPolicy, limit: int
) -> Call[list[Lost]]:
    return LOSE_RUNNING.call(
        lost_cutoff=now - lost_secs,
        live_cutoff=now - node_ttl,
        limit=limit,
        now=now,
        stamp=rfc3339(now),
        **retries.args(),
    )


PROMOTE_DUE = Script(
    "PROMOTE_DUE",
    "now live_cutoff batch",
    _batch,
)


def promote_due(now: float, node_ttl: float, batch: int) -> Call[Batch]:
    return PROMOTE_DUE.call(now=now, live_cutoff=now - node_ttl, batch=batch)


PLACE_UNPLACED = Script(
    "PLACE_UNPLACED",
    "live_cutoff batch",
    _batch,
)


def place_unplaced(now: float, node_ttl: float, batch: int) -> Call[Batch]:
    """One step of a pass over the unplaced jobs, when one is flagged (else nothing)."""
    return PLACE_UNPLACED.call(live_cutoff=now - node_ttl, batch=batch)


TRIM_OUTBOX = Script(
    "TRIM_OUTBOX",
    "*entries",
    int,
)


def trim_outbox(handed_over: Sequence[bytes]) -> Call[int]:
    """Drop the outbox entries `handed_over` (read from its head, in order) to rq."""
    return TRIM_OUTBOX.call(entries=handed_over)

"""The scripts of the SQLite snapshot (scheduler/snapshot/): the dirty set a snapshot takes,
and the restore. Each with its call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.models.record import split
from scheduler.models.wire import rfc3339
from scheduler.store.scripts.endings import SETTLE_UNITS
from scheduler.store.scripts.script import Call, Script

TAKE_DIRTY = Script(
    "TAKE_DIRTY",
    "",
    int,
)


def take_dirty() -> Call[int]:
    return TAKE_DIRTY.call()


@dataclass(frozen=True, slots=True)
class RestoredJob:
    """A job to put back: its record (whole: the restore puts it in parts, models/record.py)
    and what its indexes need. `started` (epoch s) is set for a running run-job only: those
    are the ones in the busy set and the deadlines.
    `finished` (epoch s) is set for a finished job only (done or failed: the retention
    index). `due` (epoch s) for a delayed job only (the delayed index)."""

    job_id: str
    score: float
    node_id: str
    status: str
    started: float | None
    finished: float | None
    record: bytes
    due: float | None = None
    priority: int = 0  # the record's: its place in its node's queue while pending
    cpus: int = 0  # the record's asks, held on its node while bound there (room.lua hold)
    memory_mb: int = 0
    schedule: str = ""  # the schedule that made it: its index (keys.py schedule_jobs)
    job_type: str = ""  # the record's: a run-job holds a slot while running or cancelling
    namespace: str = ""  # the record's: its namespace's indexes ("": the default's)
    pending_reason: str = ""  # the record's: a pending job on no node waits for quota or not


RESTORE_JOBS = Script(
    "RESTORE_JOBS",
    "mark_dirty *jobs",
    int,
)


def _entered(job: RestoredJob) -> float:
    """When the job entered its status, for an index of its place scored by that time: each
    of `due`, `started` and `finished` is set only for the status it scores; 0 for a
    cancelling job (and any other, which no time scores)."""
    times = (job.due, job.started, job.finished)
    return next((when for when in times if when is not None), 0.0)


def restore_jobs(jobs: Sequence[RestoredJob], mark_dirty: bool) -> Call[int]:
    values: list[Any] = []
    for job in jobs:
        values += [job.job_id, job.score, job.node_id, job.status, _entered(job), job.job_type]
        values += [job.priority, job.cpus, job.memory_mb]
        parts = split(job.record)
        values += [parts.head, parts.spec, *parts.outputs, job.schedule, job.namespace]
        values.append(job.pending_reason)
    return RESTORE_JOBS.call(mark_dirty="1" if mark_dirty else "0", jobs=values)


FINISH_RESTORE = Script(
    "FINISH_RESTORE",
    "highest marker",
    lambda _: None,
)


def finish_restore(highest_job_number: int, marker: str) -> Call[None]:
    return FINISH_RESTORE.call(highest=highest_job_number, marker=marker)


UPGRADE_RETIRED = Script(
    "UPGRADE_RETIRED",
    "status ending batch",
    int,
)


def upgrade_retired(status: str, ending: str, batch: int) -> Call[int]:
    return UPGRADE_RETIRED.call(status=status, ending=ending, batch=batch)


INDEX_NAMESPACES = Script(
    "INDEX_NAMESPACES",
    "ids",
    int,
)


def index_namespaces(job_ids: Sequence[str]) -> Call[int]:
    return INDEX_NAMESPACES.call(ids=json.dumps(list(job_ids)))


SPLIT_RECORD = Script(
    "SPLIT_RECORD",
    "job_id whole head spec stdout stderr",
    int,
)


def split_record(job_id: str, whole: bytes) -> Call[int]:
    parts = split(whole)
    return SPLIT_RECORD.call(
        job_id=job_id,
        whole=whole,
        head=parts.head,
        spec=parts.spec,
        stdout=parts.outputs[0],
        stderr=parts.outputs[1],
    )


REBUILD_WAITING = Script(
    "REBUILD_WAITING",
    "above batch units now stamp",
    lambda reply: (bool(reply[0]), float(reply[1])),
)


def rebuild_waiting(above: float, batch: int, now: float) -> Call[tuple[bool, float]]:
    return REBUILD_WAITING.call(
        above=above, batch=batch, units=SETTLE_UNITS, now=now, stamp=rfc3339(now)
    )

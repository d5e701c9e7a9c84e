"""Retries: the deployment's automatic retry rule, as the scripts that retry a job take it
(ARGV `max_retries backoff backoff_cap seed`; life.lua `retries_left`, `retry_wait`; a job may
carry its own max_retries and retry_backoff_secs, which the scripts read first), and the
operator's retry by hand of failed jobs (RETRY_JOBS)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.config import Settings
from scheduler.models.job import MAX_WAITERS
from scheduler.nodes.placement import Placement
from scheduler.store.scripts import codes
from scheduler.store.scripts.endings import SETTLE_UNITS
from scheduler.store.scripts.script import Call, Script

ARGV = "max_retries backoff backoff_cap seed"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int  # MAX_JOB_RETRIES
    backoff_secs: int  # RETRY_BACKOFF_SECS: 0, a retry at once (the original's)
    backoff_cap_secs: int  # RETRY_BACKOFF_CAP_SECS

    @classmethod
    def of(cls, settings: Settings) -> RetryPolicy:
        return cls(
            settings.max_job_retries, settings.retry_backoff_secs, settings.retry_backoff_cap_secs
        )

    def args(self, seed: float | None = None) -> dict[str, Any]:
        """The call's arguments; `seed` spreads the jitter of the jobs it retries (random
        unless a test fixes it)."""
        return {
            "max_retries": self.max_retries,
            "backoff": self.backoff_secs,
            "backoff_cap": self.backoff_cap_secs,
            "seed": random.random() if seed is None else seed,
        }


@dataclass(frozen=True, slots=True)
class Retried:
    """One job of a retry by hand: `code` OK (its record's head in `job`: the store puts its
    record together), NOT_FOUND, NOT_FAILED, NO_NODES, TOO_MANY or BLOCKED (`blocked_by`: the
    failed job it runs after, which a retry must start over first)."""

    job_id: str
    code: int
    job: bytes
    blocked_by: str = ""


def _one(job_id: bytes, code: int, said: bytes) -> Retried:
    """An id's entry of the reply: its third item is the failed dependency of a BLOCKED one,
    else the job's head (or "")."""
    if code == codes.BLOCKED:
        return Retried(str(job_id, "utf-8"), code, b"", str(said, "utf-8"))
    return Retried(str(job_id, "utf-8"), code, said)


def _retried(reply: list[Any]) -> list[Retried]:
    return [_one(reply[i], int(reply[i + 1]), reply[i + 2]) for i in range(0, len(reply), 3)]


RETRY_JOBS = Script(
    "RETRY_JOBS",
    "mode now node_ttl max_waiters units count by namespaces *rest",
    _retried,
)


def retry_jobs(
    job_ids: Sequence[str],
    placement: Placement,
    now: float,
    node_ttl: float,
    by: str = "",
    namespaces: str = "",
) -> Call[list[Retried]]:
    """The failed jobs of the first of `job_ids` pending again, placed by `placement` (a new
    job's), retried by the key named `by` (their retried_by): as many as one call's bounded
    work takes (at least one), in order; the answer says which, and the caller sends the
    others again. A job outside `namespaces` (the caller's, models/namespace.py scope; "":
    every namespace) is NOT_FOUND, untouched."""
    return RETRY_JOBS.call(
        mode=placement.mode,
        now=now,
        node_ttl=node_ttl,
        max_waiters=MAX_WAITERS,
        units=SETTLE_UNITS,
        count=len(job_ids),
        by=by,
        namespaces=namespaces,
        rest=[*job_ids, *placement.candidates],
    )

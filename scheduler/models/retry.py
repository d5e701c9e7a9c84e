"""Retry by hand on the wire (POST /jobs/retry): its body and answer. The server
(api/retries.py) and the client (scheduler/client) read them from here."""

from __future__ import annotations

import msgspec

MAX_IDS = 1000  # one script call; a bigger dead set goes in several requests


class RetryRequest(msgspec.Struct, forbid_unknown_fields=True):
    job_ids: list[str]


class RetryAnswer(msgspec.Struct):
    retried: list[str]
    not_found: list[str]
    not_failed: list[str]
    unplaced: list[str]
    blocked: list[str]  # a job it runs after is failed: retry that one too
    # A job it runs after is waited for by MAX_WAITERS jobs already (a new job's `after`
    # too). Absent when none is: the answer of earlier versions otherwise.
    too_many_waiters: list[str] | msgspec.UnsetType = msgspec.UNSET
    # Each blocked job's failed job it runs after (the first found), by the blocked job's
    # id: what to retry first. Absent when none is blocked (and from earlier versions).
    blocked_by: dict[str, str] | msgspec.UnsetType = msgspec.UNSET


# Why a job was not retried, by the answer's list it is in: POST /jobs/{id}/retry's refusals
# (api/retries.py) and `scheduler retry`'s errors (cli/retry.py) say the same.
REFUSALS = {
    "not_found": "job not found",
    "not_failed": "job is not failed",
    "unplaced": "no healthy compute nodes",
    "too_many_waiters": "a job it runs after is waited for by too many jobs already",
}


def blocked_words(dependency: str) -> str:
    """Why a job `blocked` was not retried, `dependency` the failed job it runs after."""
    return f"a job it runs after has failed ({dependency}): retry that one first"

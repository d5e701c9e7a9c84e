"""The scripts of the request path: create (create.py, named here too), poll, report and
cancel jobs (the built-in registry's are in nodes.py), each with its call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.models.job import JobUpdate
from scheduler.models.record import digest
from scheduler.models.wire import rfc3339
from scheduler.store.errors import Conflict, JobNotFound
from scheduler.store.scripts import codes, retry
from scheduler.store.scripts.codes import check_access, check_found
from scheduler.store.scripts.create import (
    CREATE_AFTER,
    CREATE_JOB,
    NO_ASKS,
    NO_DEDUP,
    Asks,
    Created,
    Dedup,
    create_job,
    create_job_of,
)
from scheduler.store.scripts.replies import ids
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call, Script

# The creation's names, where the request path's callers (and benchmarks of earlier
# versions) find them.
__all__ = [
    "CANCEL_JOB", "CHECK_REPORT", "CREATE_AFTER", "CREATE_JOB", "NO_ASKS", "NO_DEDUP", "POLL",
    "TRANSITION", "Asks", "Created", "Dedup", "Polled", "Poller", "cancel_job", "changed",
    "check_report", "create_job", "create_job_of", "poll", "polled", "transition",
]  # fmt: skip


@dataclass(slots=True)  # not frozen: a frozen init is ~0.4 µs more per poll
class Polled:
    """An agent's poll: the jobs to run, and the ids of its jobs being cancelled."""

    jobs: list[bytes]  # their heads (models/record.py): JobStore reads their parts apart
    cancels: list[str]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.cancels)


def polled(reply: list[Any]) -> Polled:
    check_access(reply[0])
    return Polled(jobs=reply[2:], cancels=ids(reply[1]))


# Not read-only: a poll notes the jobs it leaves waiting, and an idle node's takes some
# (work stealing, lua/includes/steal.lua).
POLL = Script("POLL", "node max_jobs caller capacity named stealing builtin", polled)


@dataclass(frozen=True, slots=True)
class Poller:
    """Who polls: the node, the caller (access.lua), and what its agent says of itself (the
    original says neither): how many jobs it runs at once (`capacity`, None: unsaid; the
    poll hands out no more than that less what runs there) and whether its
    claims name its node (`named`), which lets idle nodes take from its queue."""

    node_id: str
    caller: str
    capacity: int | None = None
    named: bool = False


def poll(poller: Poller, max_jobs_per_node: int, steal: bool, builtin: bool = True) -> Call[Polled]:
    """`builtin`: the built-in registry's (placement may place again a job held back for
    its namespace's quota; with an external registry it stays in its node's queue)."""
    return POLL.call(
        node=poller.node_id,
        max_jobs=max_jobs_per_node,
        caller=poller.caller,
        capacity="" if poller.capacity is None else poller.capacity,
        named="1" if poller.named else "",
        stealing="1" if steal else "",
        builtin="1" if builtin else "",
    )


_CONFLICTS = {
    codes.FINISHED: "job already finished",
    codes.ALREADY_RUNNING: "job already running",
    codes.NOT_RUNNING: "job is not running",
    codes.OTHER_NODE: "job is bound to another node",
    codes.CANCELLING: "job is being cancelled",
    codes.NOT_CANCELLING: "job is not being cancelled",
    codes.NOT_DUE: "job is not due yet",
    codes.NOT_PLACED: "job is not placed on a node yet",
    codes.OVER_QUOTA: "job waits for its namespace's quota",
}


def changed(reply: list[Any]) -> bytes:
    """The changed job's head (the store reads its other parts beside the call)."""
    code = reply[0]
    codes.check_staged(code)
    check_found(code, JobNotFound)
    if code in _CONFLICTS:
        raise Conflict(_CONFLICTS[code])
    blob: bytes = reply[1]
    return blob


TRANSITION = Script(
    "TRANSITION",
    "job_id status exit_code stdout stderr stdout_staged stderr_staged stdout_digest "
    "stderr_digest now stamp caller reporter node_ttl builtin " + retry.ARGV,
    changed,
)


def transition(
    job_id: str,
    update: JobUpdate,
    now: float,
    retries: RetryPolicy,
    caller: str,
    node_ttl: float,
    builtin: bool = True,
    staged: Mapping[str, str] | None = None,
) -> Call[bytes]:
    """`staged`: the outputs of `update` that were staged (ops.jobs.report), by name, with
    their tokens; the update's text of those is not sent, their digest is."""
    staged = staged or {}
    digests = {name: digest(getattr(update, name)) for name in staged}
    return TRANSITION.call(
        job_id=job_id,
        status=update.status,
        exit_code="" if update.exit_code is None else str(update.exit_code),
        stdout="" if "stdout" in staged else update.stdout,
        stderr="" if "stderr" in staged else update.stderr,
        stdout_staged=staged.get("stdout", ""),
        stderr_staged=staged.get("stderr", ""),
        stdout_digest=digests.get("stdout", ""),
        stderr_digest=digests.get("stderr", ""),
        now=now,
        stamp=rfc3339(now),
        caller=caller,
        reporter=update.node_id,
        node_ttl=node_ttl,
        builtin="1" if builtin else "0",
        **retries.args(),
    )


CANCEL_JOB = Script(
    "CANCEL_JOB",
    "job_id now stamp by namespaces",
    changed,
)


def cancel_job(job_id: str, now: float, by: str = "", namespaces: str = "") -> Call[bytes]:
    """The job cancelled (or cancelling) at `now` by the key named `by` (its cancelled_by);
    JobNotFound without it, or for a job outside `namespaces` (the key's, models/namespace.py
    scope; "": every namespace), which stays as it is."""
    return CANCEL_JOB.call(job_id=job_id, now=now, stamp=rfc3339(now), by=by, namespaces=namespaces)


CHECK_REPORT = Script(
    "CHECK_REPORT",
    "job_id caller",
    lambda code: check_found(code, JobNotFound),
    read_only=True,
)


def check_report(job_id: str, caller: str) -> Call[None]:
    return CHECK_REPORT.call(job_id=job_id, caller=caller)

"""The scripts of the request path: create (create.py, named here too), poll, report and
cancel jobs (the built-in registry's are in nodes.py), each with its call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.models.job import JobUpdate
from scheduler.models.record import OUTPUT_FIELDS as OUTPUTS
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
    if len(reply) == 1:  # nothing at all: the most frequent answer, the shortest
        return Polled(jobs=[], cancels=[])
    return Polled(jobs=reply[2:], cancels=ids(reply[1]))


# Not read-only: a poll notes the jobs it leaves waiting, and an idle node's takes some
# (work stealing, lua/includes/steal.lua). `agent`: what the poller's agent says, packed (a
# Redis call pays about a microsecond an argument): "s" stealing on (WORK_STEALING) or "-",
# "n" its claims name it or "-", then how many jobs it runs at once ("": unsaid).
POLL = Script("POLL", "node max_jobs caller agent", polled)


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


def poll(poller: Poller, max_jobs_per_node: int, steal: bool) -> Call[Polled]:
    capacity = "" if poller.capacity is None else str(poller.capacity)
    agent = ("s" if steal else "-") + ("n" if poller.named else "-") + capacity
    return POLL.call(
        node=poller.node_id, max_jobs=max_jobs_per_node, caller=poller.caller, agent=agent
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


# What a report rarely needs comes packed in two arguments, read only on the paths that use
# them (a Redis call pays about a microsecond an argument): `staged`, its outputs staged apart
# ("": none), and `policy`, where a failure's retry goes and when.
TRANSITION = Script(
    "TRANSITION",
    "job_id status exit_code stdout stderr now stamp caller reporter staged policy",
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
    return TRANSITION.call(
        job_id=job_id,
        status=update.status,
        exit_code="" if update.exit_code is None else str(update.exit_code),
        stdout="" if "stdout" in staged else update.stdout,
        stderr="" if "stderr" in staged else update.stderr,
        now=now,
        stamp=rfc3339(now),
        caller=caller,
        reporter=update.node_id,
        staged=_staged(update, staged),
        policy=_policy(retries, node_ttl, builtin),
    )


def _staged(update: JobUpdate, staged: Mapping[str, str]) -> str:
    """TRANSITION's `staged`: "" or "<stdout token> <stderr token> <stdout SHA-1> <stderr
    SHA-1>", each "" for an output not staged (tokens and digests hold no space)."""
    if not staged:
        return ""
    digests = [digest(getattr(update, name)) if name in staged else "" for name in OUTPUTS]
    return " ".join([*(staged.get(name, "") for name in OUTPUTS), *digests])


def _policy(retries: RetryPolicy, node_ttl: float, builtin: bool) -> str:
    """TRANSITION's `policy`: "<node_ttl> <builtin 1|0> <max_retries> <backoff> <backoff_cap>
    <seed>" (transition.lua reads it on a failure only)."""
    args = retries.args()
    values = (node_ttl, "1" if builtin else "0", *(args[name] for name in retry.ARGV.split()))
    return " ".join(str(value) for value in values)


CANCEL_JOB = Script(
    "CANCEL_JOB",
    "job_id now stamp",
    changed,
)


def cancel_job(job_id: str, now: float) -> Call[bytes]:
    return CANCEL_JOB.call(job_id=job_id, now=now, stamp=rfc3339(now))


CHECK_REPORT = Script(
    "CHECK_REPORT",
    "job_id caller",
    lambda code: check_found(code, JobNotFound),
    read_only=True,
)


def check_report(job_id: str, caller: str) -> Call[None]:
    return CHECK_REPORT.call(job_id=job_id, caller=caller)

"""Script calls, built as plain values so the async API and the sync rq workers share them.

Each function returns a `Call`: which script, its KEYS and ARGV, and how to read the reply
(turning the script's return codes into exceptions). `store.JobStore` (asyncio) and
`store.SyncJobStore` (workers) run them; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scheduler.models import JobUpdate, rfc3339
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store import lua
from scheduler.store.keys import Keys

T = TypeVar("T")


class JobNotFound(LookupError):
    def __str__(self) -> str:
        return "job not found"


class NodeNotFound(LookupError):
    def __str__(self) -> str:
        return "node not found"


class Conflict(Exception):
    """A report the state machine refuses; the message is the API's 409 text."""


class Unauthorized(Exception):
    """An agent call without a valid node token or the API key (AGENT_AUTH=token)."""

    def __str__(self) -> str:
        return "unauthorized"


class Forbidden(Exception):
    """A valid node token used on another node, or a change it does not allow."""

    def __init__(self, message: str = "forbidden: the node token is for another node") -> None:
        super().__init__(message)


class TooManyNodes(Exception):
    """MAX_NODES nodes are registered; the operator deletes some first."""

    def __str__(self) -> str:
        return "too many nodes registered (MAX_NODES)"


def check_access(code: int) -> None:
    if code == lua.UNAUTHORIZED:
        raise Unauthorized()
    if code == lua.FORBIDDEN:
        raise Forbidden()


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    script: str
    keys: list[str]
    args: list[Any]
    parse: Callable[[Any], T]


@dataclass(frozen=True, slots=True)
class Created:
    job: bytes
    duplicate: bool


class StoreNotReady(Exception):
    """Redis holds no restore marker: it lost its data and the snapshot is not back yet."""

    def __str__(self) -> str:
        return "store not ready: restoring from the snapshot"


def _created(reply: list[Any]) -> Created:
    if reply[0] == lua.NOT_READY:
        raise StoreNotReady()
    if reply[0] == lua.NO_NODES:
        raise NoHealthyNodes()
    return Created(job=reply[1], duplicate=reply[0] == lua.DUPLICATE)


def create_job(
    keys: Keys,
    job_json: bytes,
    placement: Placement,
    now: float,
    node_ttl: float,
    dedup_key: str = "",
    dedup_ttl: int = 0,
) -> Call[Created]:
    """`job_json` is the new job's JSON object without job_id and node_id."""
    return Call(
        "CREATE_JOB",
        [
            keys.root,
            keys.job_seq,
            keys.rr_seq,
            keys.all_jobs,
            keys.dirty,
            keys.nodes_compute,
            keys.sqs_message(dedup_key),
            keys.initialised,
        ],
        [
            job_json,
            placement.mode,
            now,
            node_ttl,
            dedup_ttl if dedup_key else 0,
            *placement.candidates,
        ],
        _created,
    )


def _picked(reply: list[Any]) -> str:
    if reply[0] == lua.NO_NODES:
        raise NoHealthyNodes()
    return str(reply[1], "utf-8")


def pick_node(keys: Keys, placement: Placement, now: float, node_ttl: float) -> Call[str]:
    return Call(
        "PICK_NODE",
        [keys.root, keys.rr_seq, keys.nodes_compute],
        [placement.mode, now, node_ttl, *placement.candidates],
        _picked,
    )


def ids(raw: list[bytes]) -> list[str]:
    return [str(job_id, "utf-8") for job_id in raw]


def _blobs(reply: list[bytes | None]) -> list[bytes]:
    return [blob for blob in reply if blob is not None]


@dataclass(slots=True)  # not frozen: a frozen init is ~0.4 µs more per poll
class Polled:
    """An agent's poll: the jobs to run, and the ids of its jobs being cancelled."""

    jobs: list[bytes]
    cancels: list[str]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.cancels)


def polled(reply: list[Any]) -> Polled:
    check_access(reply[0])
    return Polled(jobs=_blobs(reply[2:]), cancels=ids(reply[1]))


def poll(keys: Keys, node_id: str, max_jobs_per_node: int, caller: str) -> Call[Polled]:
    return Call(
        "POLL",
        [
            keys.root,
            keys.node_busy(node_id),
            keys.node_status(node_id, "pending"),
            keys.tokens,
            keys.node_status(node_id, "cancelling"),
        ],
        [max_jobs_per_node, node_id, caller],
        polled,
    )


def list_jobs(
    keys: Keys, index: str, bound: int, limit: int, budget_bytes: int, newest: bool = False
) -> Call[list[bytes]]:
    """Oldest first from after job-`bound`, or with `newest` newest first from before it
    (0: from the newest)."""
    order = "desc" if newest else "asc"
    return Call("LIST", [keys.root, index], [bound, limit, budget_bytes, order], _blobs)


_CONFLICTS = {
    lua.FINISHED: "job already finished",
    lua.ALREADY_RUNNING: "job already running",
    lua.NOT_RUNNING: "job is not running",
    lua.OTHER_NODE: "job is bound to another node",
    lua.CANCELLING: "job is being cancelled",
    lua.NOT_CANCELLING: "job is not being cancelled",
}


def _transitioned(reply: list[Any]) -> bytes:
    code = reply[0]
    if code == lua.NOT_FOUND:
        raise JobNotFound()
    check_access(code)
    if code in _CONFLICTS:
        raise Conflict(_CONFLICTS[code])
    blob: bytes = reply[1]
    return blob


def _job_change_keys(keys: Keys, job_id: str) -> list[str]:
    """KEYS[1..8] of the scripts that change one job's status (TRANSITION, CANCEL_JOB)."""
    return [
        keys.root,
        keys.job(job_id),
        keys.all_jobs,
        keys.deadlines,
        keys.dirty,
        keys.outbox,
        keys.event_seq,
        keys.finished,
    ]


def transition(
    keys: Keys, job_id: str, update: JobUpdate, now: float, max_retries: int, caller: str
) -> Call[bytes]:
    exit_code = "" if update.exit_code is None else str(update.exit_code)
    return Call(
        "TRANSITION",
        [*_job_change_keys(keys, job_id), keys.tokens, keys.cancelling],
        [
            job_id,
            update.status,
            exit_code,
            update.stdout,
            update.stderr,
            now,
            rfc3339(now),
            max_retries,
            caller,
            update.node_id,
        ],
        _transitioned,
    )


def _cancelled(reply: list[Any]) -> bytes:
    if reply[0] == lua.NOT_FOUND:
        raise JobNotFound()
    if reply[0] == lua.FINISHED:
        raise Conflict("job already finished")
    blob: bytes = reply[1]
    return blob


def cancel_job(keys: Keys, job_id: str, now: float) -> Call[bytes]:
    cancel_keys = [*_job_change_keys(keys, job_id), keys.cancelling]
    return Call("CANCEL_JOB", cancel_keys, [job_id, now, rfc3339(now)], _cancelled)


def _report_allowed(code: int) -> None:
    if code == lua.NOT_FOUND:
        raise JobNotFound()
    check_access(code)


def check_report(keys: Keys, job_id: str, caller: str) -> Call[None]:
    return Call(
        "CHECK_REPORT", [keys.root, keys.job(job_id), keys.tokens], [caller], _report_allowed
    )

"""Script calls, built as plain values so the async API and the sync rq workers share them.

Each function returns a `Call`: which script, its KEYS and ARGV, and how to read the reply
(turning the script's return codes into exceptions). `store.JobStore` (asyncio) and
`store.SyncJobStore` (workers) run them; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _check_access(code: int) -> None:
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
            keys.sqs_message(dedup_key) if dedup_key else "",
            keys.initialised,
        ],
        [job_json, placement.mode, now, node_ttl, dedup_ttl, *placement.candidates],
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


def _blobs(reply: list[bytes | None]) -> list[bytes]:
    return [blob for blob in reply if blob is not None]


@dataclass(frozen=True, slots=True)
class Polled:
    """An agent's poll: the jobs to run, and the ids of its jobs being cancelled."""

    jobs: list[bytes]
    cancels: list[str]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.cancels)


def _polled(reply: list[Any]) -> Polled:
    _check_access(reply[0])
    return Polled(jobs=_blobs(reply[2:]), cancels=_ids(reply[1]))


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
        _polled,
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
    _check_access(code)
    if code in _CONFLICTS:
        raise Conflict(_CONFLICTS[code])
    blob: bytes = reply[1]
    return blob


def transition(
    keys: Keys, job_id: str, update: JobUpdate, now: float, max_retries: int, caller: str
) -> Call[bytes]:
    exit_code = "" if update.exit_code is None else str(update.exit_code)
    return Call(
        "TRANSITION",
        [
            keys.root,
            keys.job(job_id),
            keys.all_jobs,
            keys.deadlines,
            keys.dirty,
            keys.outbox,
            keys.event_seq,
            keys.finished,
            keys.tokens,
            keys.cancelling,
        ],
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
    cancel_keys = [
        keys.root,
        keys.job(job_id),
        keys.all_jobs,
        keys.deadlines,
        keys.dirty,
        keys.outbox,
        keys.event_seq,
        keys.finished,
        keys.cancelling,
    ]
    return Call("CANCEL_JOB", cancel_keys, [job_id, now, rfc3339(now)], _cancelled)


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


def _report_allowed(code: int) -> None:
    if code == lua.NOT_FOUND:
        raise JobNotFound()
    _check_access(code)


def check_report(keys: Keys, job_id: str, caller: str) -> Call[None]:
    return Call(
        "CHECK_REPORT", [keys.root, keys.job(job_id), keys.tokens], [caller], _report_allowed
    )


@dataclass(frozen=True, slots=True)
class Batch:
    """One call of a sweep over an index: how many entries it read, which jobs it changed,
    and how many entries it left in the index for a later sweep."""

    read: int
    ids: list[str]
    kept: int = 0


def _ids(raw: list[bytes]) -> list[str]:
    return [str(job_id, "utf-8") for job_id in raw]


def _batch(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], ids=_ids(reply[1:]))


def _pruned(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], kept=reply[1], ids=_ids(reply[2:]))


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


def _requeued(reply: list[bytes]) -> list[Requeued]:
    text = [str(part, "utf-8") for part in reply]
    return [Requeued(*text[i : i + 3]) for i in range(0, len(text), 3)]


def requeue_lost(
    keys: Keys, now: float, lost_secs: float, node_ttl: float, limit: int
) -> Call[list[Requeued]]:
    return Call(
        "REQUEUE_LOST",
        [keys.root, keys.nodes_compute, keys.rr_seq, keys.dirty, keys.all_jobs],
        [now - lost_secs, now - node_ttl, limit],
        _requeued,
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
    text = [str(part, "utf-8") for part in reply]
    return [Lost(*text[i : i + 4]) for i in range(0, len(text), 4)]


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


def _node_keys(keys: Keys) -> list[str]:
    return [
        keys.root,
        keys.nodes,
        keys.nodes_seen,
        keys.nodes_compute,
        keys.node_tokens,
        keys.tokens,
    ]


@dataclass(frozen=True, slots=True)
class Registration:
    """Who registers a node and under which rules (REGISTER_NODE's header)."""

    caller: str
    agent_auth: str
    key_required: bool
    max_nodes: int
    node_ttl: float


def _registered(reply: list[Any]) -> str:
    code = reply[0]
    if code == lua.UNAUTHORIZED:
        raise Unauthorized()
    if code == lua.TOO_MANY_NODES:
        raise TooManyNodes()
    if code == lua.ROLE_LOCKED:
        raise Forbidden("forbidden: changing a node's role needs its token or the API key")
    return str(reply[1], "utf-8")


def register_node(
    keys: Keys,
    node_id: str,
    node_json: bytes,
    role: str,
    now: float,
    who: Registration,
    token_hash: str,
) -> Call[str]:
    """Returns "issued" (the token of `token_hash` is now the node's), "kept" (the caller's
    own token stays the node's) or "none" (an anonymous re-register: no token for it)."""
    args = [node_id, node_json, role, now, who.caller, who.agent_auth]
    args += ["1" if who.key_required else "0", token_hash, who.max_nodes, who.node_ttl]
    return Call("REGISTER_NODE", _node_keys(keys), args, _registered)


def _heartbeat(reply: list[Any]) -> tuple[bytes, list[str]]:
    if reply[0] == lua.NOT_FOUND:
        raise NodeNotFound()
    _check_access(reply[0])
    blob: bytes = reply[1]
    return blob, _ids(reply[2])


def heartbeat(keys: Keys, node_id: str, now: float, caller: str) -> Call[tuple[bytes, list[str]]]:
    """The node's record, and the ids of its jobs being cancelled."""
    beat_keys = [*_node_keys(keys), keys.node_status(node_id, "cancelling")]
    return Call("HEARTBEAT", beat_keys, [node_id, now, caller], _heartbeat)


def _deleted(reply: list[Any]) -> list[Requeued]:
    if reply[0] == lua.NOT_FOUND:
        raise NodeNotFound()
    _check_access(reply[0])
    return _requeued(reply[1:])


def delete_node(
    keys: Keys, node_id: str, now: float, node_ttl: float, limit: int, caller: str
) -> Call[list[Requeued]]:
    """Deregister a node; its pending jobs (up to `limit`) move to live nodes now."""
    return Call(
        "DELETE_NODE",
        [*_node_keys(keys), keys.rr_seq, keys.dirty, keys.all_jobs],
        [node_id, now - node_ttl, limit, caller],
        _deleted,
    )


@dataclass(frozen=True, slots=True)
class Overview:
    """The web UI's nodes page (scripts.OVERVIEW)."""

    nodes: dict[str, bytes]  # node id -> node JSON (built-in registry)
    last_seen: dict[str, float]
    queues: dict[str, tuple[int, int]]  # node id -> (pending, running)
    by_status: dict[str, int]
    stats: dict[str, int]
    outbox: int


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {str(flat[i], "utf-8"): flat[i + 1] for i in range(0, len(flat), 2)}


def _overview(reply: list[Any]) -> Overview:
    nodes, seen, counts, by_status, stats, outbox = reply
    queues = {
        str(counts[i], "utf-8"): (counts[i + 1], counts[i + 2]) for i in range(0, len(counts), 3)
    }
    return Overview(
        nodes=_pairs(nodes),
        last_seen={k: float(v) for k, v in _pairs(seen).items()},
        queues=queues,
        by_status=_pairs(by_status),
        stats={k: int(v) for k, v in _pairs(stats).items()},
        outbox=outbox,
    )


def overview(keys: Keys, statuses: Sequence[str]) -> Call[Overview]:
    node_keys = [keys.root, keys.nodes, keys.nodes_seen, keys.nodes_compute]
    return Call("OVERVIEW", [*node_keys, keys.stats, keys.outbox], list(statuses), _overview)


class ServiceNotFound(LookupError):
    def __str__(self) -> str:
        return "not found"  # the original registry's text


def _service_keys(keys: Keys, node_id: str = "") -> list[str]:
    node = keys.node_services(node_id) if node_id else ""
    return [keys.root, keys.services, keys.service_seq, keys.tokens, node]


def _service_created(reply: list[Any]) -> bytes:
    _check_access(reply[0])
    if reply[0] == lua.TOO_MANY_NODES:
        raise TooManyServices()
    blob: bytes = reply[1]
    return blob


class TooManyServices(Exception):
    def __str__(self) -> str:
        return "too many services registered"


def create_service(
    keys: Keys, node_id: str, service_json: bytes, caller: str, most: int, most_per_node: int
) -> Call[bytes]:
    """`service_json` starts with `{"id":""` (models.Service, id first); the script fills it."""
    args = [node_id, service_json, caller, most, most_per_node]
    return Call("CREATE_SERVICE", _service_keys(keys, node_id), args, _service_created)


def _service_set(code: int) -> None:
    if code == lua.NOT_FOUND:
        raise ServiceNotFound()
    _check_access(code)


def set_service_status(keys: Keys, service_id: str, status: str, caller: str) -> Call[None]:
    args = [service_id, status, caller]
    return Call("SET_SERVICE_STATUS", _service_keys(keys), args, _service_set)


def _services(reply: list[Any]) -> list[bytes]:
    _check_access(reply[0])
    return list(reply[1:])


def list_services(keys: Keys, node_id: str, status: str, caller: str) -> Call[list[bytes]]:
    args = [node_id, status, caller]
    return Call("LIST_SERVICES", _service_keys(keys, node_id), args, _services)


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

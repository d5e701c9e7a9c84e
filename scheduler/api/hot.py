"""The hot calls: read a job, an agent's poll, submit, an agent's report. Each is written once
over plain inputs (ids, the caller, the declared size, a body reader), so the Starlette routes
(app.py) and the hot lane (lane.py) answer them alike: same checks, same order, same errors."""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import msgspec

from scheduler.api.agents import PRECHECK_OVER_BYTES
from scheduler.api.http import (
    NO_STORE,
    HTTPError,
    no_charge,
    not_one_of,
    too_large,
    undecodable,
    whole_number,
)
from scheduler.api.state import AppState
from scheduler.api.stores import Store
from scheduler.models import poll
from scheduler.models.access_key import Principal
from scheduler.models.job import (
    REPORT_STATUSES,
    JobCreate,
    JobUpdate,
    asks_fit,
    bound_output,
    new_job,
    seen_by,
    shown_to,
    stamped,
    validate_create,
    validate_update,
)
from scheduler.models.wire import (
    ID_RE,
    IDEMPOTENCY_KEY_MAX,
    IDEMPOTENCY_KEY_RE,
    IDEMPOTENCY_KEY_RULE,
    DecodeError,
    decode_go_style,
)
from scheduler.snapshot.restore import restore_at_start
from scheduler.store import ops
from scheduler.store.errors import Conflict, StoreNotReady
from scheduler.store.scripts.jobs import NO_DEDUP, Created, Dedup, Polled, Poller

T = TypeVar("T")
Charge = Callable[[int], None]
# (limit, charge) -> the whole body; 413 past `limit`, each part's size told to `charge`
BodyReader = Callable[[int, Charge], Coroutine[Any, Any, bytes]]


def job_id_or_404(job_id: str) -> str:
    if not ID_RE.fullmatch(job_id):
        raise HTTPError(404, "job not found")
    return job_id


def check_node_id(node_id: str) -> None:
    if node_id and not ID_RE.fullmatch(node_id):
        raise HTTPError(400, "invalid node_id: use 1 to 128 of A-Z a-z 0-9 . _ -")


# The most jobs an agent may say it runs at once (a poll's `capacity`).
MAX_CAPACITY = 10_000


def poller(node_id: str, caller: str, capacity: str, claims: str) -> Poller:
    """A poll's poller (store/scripts/jobs.py) from its node_id and what our agent says of
    itself, which the original's never does: `capacity`, how many jobs it runs at once, and
    `claims=named`, its claims name its node (work stealing may then take from its queue);
    a 400 naming a bad one."""
    check_node_id(node_id)
    if claims not in ("", poll.NAMED):
        raise HTTPError(
            400,
            f"invalid {poll.CLAIMS}: use {poll.CLAIMS}={poll.NAMED} (its claims name its node) "
            "or none",
        )
    if not capacity:
        return Poller(node_id, caller, None, bool(claims))
    count = whole_number(capacity, MAX_CAPACITY)
    if count is None:
        raise HTTPError(
            400, f"invalid {poll.CAPACITY}: use a whole number of jobs, 0 to {MAX_CAPACITY}"
        )
    return Poller(node_id, caller, count, bool(claims))


async def read_job(store: Store, job_id: str, caller: Principal) -> bytes:
    """GET /jobs/{id}: the job as `caller` may see it (`job_for`)."""
    return job_for(caller, await store.run(ops.jobs.get(job_id_or_404(job_id))))


def job_for(caller: Principal, blob: bytes | None) -> bytes:
    """A job's record as `caller` may see it (models/job.py shown_to); a job of a namespace
    the caller's key is not limited to is answered exactly as one that does not exist (404):
    the key cannot tell it exists."""
    if blob is not None and not seen_by(caller, blob):
        blob = None
    return shown_to(caller, job_reply(blob))


def job_reply(blob: bytes | None) -> bytes:
    if blob is None:
        raise HTTPError(404, "job not found")
    return blob


def polled_reply(polled: Polled, cap: int) -> tuple[bytes, dict[str, str]]:
    """The jobs, as the original; in headers, which the original agent ignores and the
    reference agent acts on, the ids of the node's jobs being cancelled and `cap`, the
    jobs a node runs at once (MAX_JOBS_PER_NODE): an agent started with more says so."""
    headers = poll_headers(cap)
    if polled.cancels:
        headers = {"X-Cancel-Jobs": ",".join(polled.cancels), **headers}
    return b"[" + b",".join(polled.jobs) + b"]", headers


@functools.cache
def poll_headers(cap: int) -> dict[str, str]:
    """A poll's headers without cancels: one dict per setting, not made on every poll."""
    return {"X-Max-Jobs-Per-Node": str(cap), **NO_STORE}


async def create_job(
    state: AppState, read: BodyReader, idempotency_key: str, by: Principal
) -> Created:
    """POST /jobs by `by`: the new job (201), or with an Idempotency-Key already used for the
    same request, the job that request made (200)."""
    settings = state.settings
    check_idempotency_key(idempotency_key)
    body = await read(settings.max_body_bytes, no_charge)
    try:
        request = decode_go_style(body, JobCreate)
    except DecodeError as exc:
        raise undecodable("job", exc) from None
    job = new_job(request, by=by)
    validate_create(job)
    dedup = _dedup(idempotency_key, request, settings.idempotency_ttl_secs, job.namespace)
    now = time.time()
    job = stamped(job, request, now)
    placement = await state.nodes.placement(job.instance_id, asks_fit(job))
    # Before taking a new id: an id the snapshot holds is never made again.
    created = await once_restored(
        state, lambda: state.store.run(ops.jobs.create(job, placement, now, dedup))
    )
    if created.duplicate and not created.job:
        raise Conflict("the job of this Idempotency-Key has been removed")
    return created


async def once_restored(state: AppState, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`; when it met a Redis that lost its data under this running process (store
    not ready), the snapshot brought back first (or waited for, from the process doing it),
    then `call()` once more. Every shard's: the one that answered is not known here, and the
    others' check costs an EXISTS."""
    try:
        return await call()
    except StoreNotReady:
        await restore_at_start(state.settings)
        return await call()


def check_idempotency_key(key: str) -> None:
    if key and not IDEMPOTENCY_KEY_RE.fullmatch(key):
        rule = IDEMPOTENCY_KEY_RULE.format(most=IDEMPOTENCY_KEY_MAX)
        raise HTTPError(400, f"invalid Idempotency-Key: {rule}")


def _dedup(key: str, request: msgspec.Struct, ttl: int, namespace: str) -> Dedup:
    """A submission's idempotency: its key (`key_digest`, in the job's `namespace`) and the
    fingerprint of what it asks for, the request as decoded (so formatting and field order
    do not count as another request)."""
    if not key:
        return NO_DEDUP
    canonical = msgspec.json.encode(request, order="deterministic")
    fingerprint = hashlib.sha256(canonical).hexdigest()[:32]
    return Dedup("submit", key_digest(key, namespace), ttl, fingerprint)


def key_digest(key: str, namespace: str) -> str:
    """What Redis keeps of an Idempotency-Key: its SHA-256 (any client text makes a bounded
    Redis key), per namespace (as stored). The same key sent for a job of another namespace
    is another key, so a key of one namespace never gets another namespace's job back as
    its replay, nor its 422. The default's is the key's hash alone, as before namespaces."""
    text = f"{namespace}\0{key}" if namespace else key
    return hashlib.sha256(text.encode()).hexdigest()[:32]


async def report_job(
    state: AppState, report: tuple[str, str, int | None], read: BodyReader
) -> bytes:
    """PATCH /jobs/{id}, `report` being (job id, caller, declared size). The job id, the
    declared size and (for a large or unsized body, or in token mode) the job and the caller
    are checked before a byte of the body is read, and the bytes held at once are bounded: a
    stranger's 64 MiB bodies cost nothing."""
    job_id, caller, size = report
    settings = state.settings
    if size is not None and size > settings.max_report_bytes:
        raise too_large(settings.max_report_bytes)
    # A node token is checked before the body too: in token mode a stranger's body, however
    # small, is never read. Here and below, a job not found in a Redis that lost its data may
    # be in its snapshot: restored, the report lands (neither agent retries a 404). A token
    # refused there went with the data: restored, its 401 has the agent register and retry.
    if size is None or size > PRECHECK_OVER_BYTES or caller not in ("open", "key"):
        await once_restored(state, lambda: state.store.run(ops.jobs.check_report(job_id, caller)))
    with state.report_budget.reading() as charge:
        req = _decode_update(await read(settings.max_report_bytes, charge))
        limit = settings.output_limit_bytes
        req = msgspec.structs.replace(
            req, stdout=bound_output(req.stdout, limit), stderr=bound_output(req.stderr, limit)
        )
        # The time is read in the call: a retry after a restore stamps the report with its own.
        return await once_restored(
            state, lambda: state.store.run(ops.jobs.report(job_id, req, time.time(), caller))
        )


def _decode_update(body: bytes) -> JobUpdate:
    try:
        req = decode_go_style(body, JobUpdate)
    except DecodeError as exc:
        raise undecodable("update", exc) from None
    if req.status not in REPORT_STATUSES:
        # The original's `invalid status` (CONTRACT 2.3), then the statuses a report may say.
        raise not_one_of("status", REPORT_STATUSES)
    validate_update(req)
    return req

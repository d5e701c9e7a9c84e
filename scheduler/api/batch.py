"""POST /jobs/batch, bulk submit (docs/GUIDE.md, Submitting many jobs): up to MAX_JOBS jobs in
one request, each exactly what POST /jobs takes and checked as POST /jobs checks it, made in
one Redis round trip per shard (ops.jobs.create_many: each job's own create, in step).

The answer holds one entry per job, in order: its `job_id`, or its own `error` with the
`status` POST /jobs would have answered it and the `field` the error names. It is 200 once
the batch was read, whatever became of its jobs (a bad one never stops the others); the
request itself is refused only for what is the whole batch's: its envelope (not JSON, no
`jobs`, none or more than MAX_JOBS: 400; over MAX_BATCH_BYTES: 413), its Idempotency-Key
(invalid: 400; another batch's: 422), or a store that answered none of its jobs (503).

One Idempotency-Key covers the batch: the first batch sent with it takes it
(ops.jobs.claim_batch), and each of its jobs is made under a key of its own (the batch's
and its index) through POST /jobs' machinery, so a replay answers the same ids and makes
nothing twice, and another batch under the key is 422 before anything is made."""

from __future__ import annotations

import hashlib
import re
import time
from typing import Annotated, Any

import msgspec
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.errors import reply_for
from scheduler.api.hot import check_idempotency_key, key_digest
from scheduler.api.http import HTTPError, caller, json_bytes, read_body, undecodable
from scheduler.api.state import AppState
from scheduler.models.access_key import ANYONE, Principal
from scheduler.models.batch import MAX_JOBS, Made, Refused
from scheduler.models.job import Job, JobCreate, asks_fit, new_job, stamped, validate_create
from scheduler.models.namespace import OutsideNamespace
from scheduler.models.wire import DecodeError, InvalidInput, decode_go_style, decode_with
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.nodes.registry import RegistryError
from scheduler.snapshot.restore import restore_at_start
from scheduler.store import ops
from scheduler.store.errors import Conflict, IdempotencyMismatch, StoreNotReady
from scheduler.store.scripts.jobs import NO_DEDUP, Created, Dedup

WHERE = "POST /jobs/batch"  # how the log names the route (errors.reply_for)


class Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """The body: its jobs, each left as its bytes until it is read as POST /jobs reads one."""

    jobs: list[msgspec.Raw]


class Answer(msgspec.Struct):
    jobs: list[Any]  # Made | Refused, in the batch's order


def _entry_fields() -> list[msgspec.structs.FieldInfo]:
    """The fields of Made and Refused, each once."""
    found = {f.name: f for kind in (Made, Refused) for f in msgspec.structs.fields(kind)}
    return list(found.values())


# How the route is described (routes.TABLE, openapi.py), derived from the structs above: the
# body's jobs as POST /jobs' bodies (Envelope keeps each as its bytes, read alone), and an
# answer's entry, a Made or a Refused, as one struct with the fields of both, each optional
# (msgspec describes no union of untagged structs). JobCreate and _Entry are made by
# defstruct: types to msgspec, values to mypy.
DescribedBody = msgspec.defstruct(
    "BatchRequest",
    [("jobs", Annotated[list[JobCreate], msgspec.Meta(min_length=1, max_length=MAX_JOBS)])],  # type: ignore[valid-type]
    forbid_unknown_fields=True,
    module=__name__,
)
_Entry = msgspec.defstruct(
    "BatchEntry",
    [(f.name, f.type | msgspec.UnsetType, msgspec.UNSET) for f in _entry_fields()],
    module=__name__,
)
DescribedAnswer = msgspec.defstruct(
    "BatchAnswer",
    [("jobs", list[_Entry])],  # type: ignore[valid-type]
    module=__name__,
)
_envelope_decoder = msgspec.json.Decoder(Envelope)
_id_decoder = msgspec.json.Decoder(Made)
_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(JobCreate))
# The field an error names: `failed to decode job: priority: ...`, `invalid cpus 99: ...`,
# `command or deploy_url is required`, `after: the jobs it runs after are on ...`.
_NAMED = re.compile(r"(?:failed to decode job: )?(?:invalid )?(\w+)")
# A job's request as decoded, and the job it asks for (stamped now).
Parsed = tuple[msgspec.Struct, Job]


async def submit_jobs(request: Request) -> Response:
    key = request.headers.get("idempotency-key", "")
    check_idempotency_key(key)  # before a byte of the body
    state: AppState = request.app.state
    raws = envelope(await read_body(request, state.settings.max_batch_bytes))
    made = await create_jobs(state, raws, key, caller(request))
    return json_bytes(msgspec.json.encode(Answer(made)))


def envelope(body: bytes) -> list[bytes]:
    """The batch's jobs, each as its bytes; 400 for a body that is not `{"jobs": [...]}`
    with 1 to MAX_JOBS of them."""
    try:
        jobs = decode_with(_envelope_decoder, body).jobs
    except DecodeError as exc:
        raise undecodable("batch", exc) from None
    if not 1 <= len(jobs) <= MAX_JOBS:
        raise HTTPError(400, f"invalid jobs: send 1 to {MAX_JOBS} jobs, not {len(jobs)}")
    return [bytes(raw) for raw in jobs]


async def create_jobs(
    state: AppState, raws: list[bytes], key: str, by: Principal
) -> list[Made | Refused]:
    """Each job made (or refused) as POST /jobs would, submitted `by`, in one create_many;
    under `key` (the batch's Idempotency-Key) the batch's claim first."""
    settings, now = state.settings, time.time()
    parsed = [parse_job(raw, settings.max_body_bytes, now, by) for raw in raws]
    values: list[Any] = list(parsed)
    fingerprint = _fingerprint(raws, parsed)
    ttl = settings.idempotency_ttl_secs
    claim = _dedup(key, ttl, fingerprint, by.home)  # the batch's: its key's home namespace
    if key and not await state.store.run(ops.jobs.claim_batch(claim)):
        raise IdempotencyMismatch()
    placements = await _placements(state, [p[1] for p in parsed if isinstance(p, tuple)])
    wanted: list[tuple[int, tuple[Job, Placement, Dedup]]] = []
    for i, p in enumerate(parsed):
        if isinstance(p, tuple):
            where = placements[_asks(p[1])]
            if isinstance(where, Exception):
                values[i] = where
            else:
                own = _dedup(f"{key} {i}", ttl, fingerprint, p[1].namespace)
                dedup = own if key else NO_DEDUP
                wanted.append((i, (p[1], where, dedup)))
    made = await _made(state, [w for _, w in wanted], now)
    for (i, _), value in zip(wanted, made, strict=True):
        values[i] = value
    if all(isinstance(value, RedisError) for value in values):
        raise values[0]  # nothing answered: the store's outage is the request's (503)
    return [_entry(value) for value in values]


def parse_job(raw: bytes, limit: int, now: float, by: Principal = ANYONE) -> Parsed | Exception:
    """A job of the batch read and checked as POST /jobs reads its body (`now`: its
    creation, `by`: who submits it), or the error POST /jobs would answer."""
    if len(raw) > limit:
        return HTTPError(413, f"job too large (limit {limit} bytes)")
    try:
        request = decode_go_style(raw, JobCreate)
    except DecodeError as exc:
        return undecodable("job", exc)
    try:
        job = new_job(request, by=by)
        validate_create(job)
        return request, stamped(job, request, now)
    except (InvalidInput, OutsideNamespace) as exc:
        return exc


def _fingerprint(raws: list[bytes], parsed: list[Parsed | Exception]) -> str:
    """What makes a batch another batch: each job as decoded (as POST /jobs fingerprints a
    request: field order and spacing do not count), refused or not; one that does not
    decode by its bytes."""
    digest = hashlib.sha256()
    for raw, p in zip(raws, parsed, strict=True):
        part = msgspec.json.encode(p[0], order="deterministic") if isinstance(p, tuple) else raw
        if isinstance(p, InvalidInput):  # it decoded: its decoded form, as a good one's
            part = msgspec.json.encode(decode_go_style(raw, JobCreate), order="deterministic")
        digest.update(b"%d:%s" % (len(part), part))
    return digest.hexdigest()[:32]


def _dedup(key: str, ttl: int, fingerprint: str, namespace: str) -> Dedup:
    """A key's Dedup in `namespace` (hot.key_digest, as POST /jobs' key): the batch's, or a
    job's, `<batch key> <index>`, which no client's key can be (a key has no space)."""
    return Dedup("submit", key_digest(key, namespace), ttl, fingerprint)


def _asks(job: Job) -> tuple[str, bool]:
    return job.instance_id, asks_fit(job)


async def _placements(
    state: AppState, jobs: list[Job]
) -> dict[tuple[str, bool], Placement | Exception]:
    """Where each kind of job may go (its instance, whether it asks a fit), asked once per
    kind: a thousand jobs of one kind ask the node source once."""
    found: dict[tuple[str, bool], Placement | Exception] = {}
    for job in jobs:
        asks = _asks(job)
        if asks not in found:
            try:
                found[asks] = await state.nodes.placement(*asks)
            except (RegistryError, NoHealthyNodes, InvalidInput) as exc:
                found[asks] = exc
    return found


async def _made(
    state: AppState, wanted: list[tuple[Job, Placement, Dedup]], now: float
) -> list[Created | Exception]:
    """create_many's values; the jobs a Redis that lost its data refused (StoreNotReady:
    none was made) sent again once the snapshot is back (hot.once_restored, for the jobs
    that need it)."""
    if not wanted:
        return []
    made = await state.store.run(ops.jobs.create_many(wanted, now))
    unready = [i for i, value in enumerate(made) if isinstance(value, StoreNotReady)]
    if unready:
        await restore_at_start(state.settings)
        again = await state.store.run(ops.jobs.create_many([wanted[i] for i in unready], now))
        for i, value in zip(unready, again, strict=True):
            made[i] = value
    return made


def _entry(value: Created | Exception) -> Made | Refused:
    """A job's entry in the answer: its id, or its error as POST /jobs would answer it (an
    error nothing expects is raised: a bug, 500, as there)."""
    if isinstance(value, Created) and value.job:
        return _id_decoder.decode(value.job)
    if isinstance(value, Created):  # a replay whose job was removed since
        value = Conflict("the job of this Idempotency-Key has been removed")
    reply = reply_for(value, WHERE)
    if reply is None:
        raise value
    status, message, _ = reply
    named = _NAMED.match(message)
    field = named[1] if named and named[1] in _FIELDS else ""
    return Refused(message, status, field)

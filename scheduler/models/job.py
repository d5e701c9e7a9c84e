"""A job on the wire (CONTRACT 2.2): `Job`, the one declaration of a job's fields, the
request and report bodies, and their validation.

Everything else that handles every field reads them from `Job` through `JOB_FIELDS`: the
request struct `JobCreate`, the snapshot's columns and restore (snapshot/db.py), the record
as Redis keeps it and its readers put it together (models/record.py), the UI's job page
(api/ui.py), and the tests' sample records.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any

import msgspec

from scheduler.models.access_key import ANYONE, Principal
from scheduler.models.fields import OUTPUT, SPEC, SUBMITTED, Timestamp, read_fields
from scheduler.models.labels import Selector, check_selector
from scheduler.models.namespace import check_namespace
from scheduler.models.registry import MEMORY_MB_MAX, NODE_CPUS_MAX
from scheduler.models.wire import InvalidInput, check_id, not_a_job_id, parse_rfc3339, rfc3339

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOB_N = re.compile(r"job-([0-9]+)")
# Job numbers above this are not exact as Redis sorted-set scores (doubles).
MAX_JOB_NUMBER = 2**53
JOB_TYPES = ("", "run", "service")
# delayed: not due yet (run_at: a delay asked for, or a retry's backoff); the worker makes it
# pending when due. waiting: some job it runs `after` has not ended yet; the last one done
# makes it pending, one failed fails it (dependency_failed). cancelling: a running job asked
# to stop (DELETE /jobs/{id}); its agent kills it and reports cancelled, or the sweep cancels
# it CANCEL_GRACE_SECS later.
STATUSES = ("pending", "delayed", "waiting", "running", "done", "failed", "cancelling")
# The original's clients (the Go CLI's and the lambda service's waits, SNS subscribers) know
# two final statuses, done and failed (CONTRACT 2.2, 2.10), and would wait forever on any
# other. So every way a job ends is one of them on the wire, and a failure the scheduler
# decided says which in `failure_reason`, a field they ignore. ENDINGS: an ending's name (as
# a report, a sweep or a cancel says it) -> (status, failure_reason). The agent's own failure
# (a non-zero exit, a failed deploy) has no reason: its exit code and stderr say why.
ENDINGS: dict[str, tuple[str, str]] = {
    "done": ("done", ""),
    "failed": ("failed", ""),
    "cancelled": ("failed", "cancelled"),
    "timed_out": ("failed", "timed_out"),
    "node_lost": ("failed", "node_lost"),
    "dependency_failed": ("failed", "dependency_failed"),
}
MAX_AFTER = 100  # the jobs one job may wait for
# The jobs that may wait for one job: its ending settles them all in one script.
MAX_WAITERS = 1000
FINAL_STATUSES = ("done", "failed")
# Before a run: a cancel ends such a job at once, and only a pending one may be claimed.
NOT_STARTED = ("pending", "delayed", "waiting")
# Final statuses an earlier version stored -> the ending they are now (records in Redis and
# rows of older snapshot files are upgraded: store/scripts/snapshot.py, snapshot/db.py).
RETIRED_STATUSES = {"cancelled": "cancelled"}
FAILURE_REASONS = tuple(reason for _, reason in ENDINGS.values() if reason)
# What an agent may report: a claim, or its ending of the job (ours reports cancelled once it
# has stopped a cancelled job).
REPORT_STATUSES = ("running", "done", "failed", "cancelled")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
Retries = Annotated[int, msgspec.Meta(ge=0, le=100)]
BackoffSecs = Annotated[int, msgspec.Meta(ge=0, le=86400)]
# A node's queue is scored N - priority * 2**42 (store/scripts/places.py queue_score): exact as
# a double while |priority| <= 1000 and the job number N < 2**42.
MAX_PRIORITY = 1000
Priority = Annotated[int, msgspec.Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
# Why a pending job has no node yet (docs/GUIDE.md, Placement): set by placement (store/scripts/
# generated.py writes its Lua table REASON from this), cleared once it is placed.
PENDING_REASONS = {
    "no_nodes": "no healthy compute node",
    # Every live node is labelled for other namespaces (models/labels.py serves).
    "namespace": "no live node serves its namespace",
    "no_fit": "no live node matches its node_selector and resources",
    "full": "the nodes that fit have no room for it now",
    "drained": "the only nodes that fit are drained",
    "quota": "its namespace runs all its quota allows",
    # It asks more cpus or memory_mb than its namespace's quota allows at all (the quota was
    # lowered after it was submitted): it waits for the quota to be raised, and the jobs
    # behind it do not wait for it.
    "exceeds_quota": "it asks more than its namespace's quota allows at all: it waits until "
    "the quota is raised",
}
# The reasons of a job waiting for its namespace's quota (in the namespace's waiting queue,
# not among the jobs placement places: store/scripts/places.py OVER_QUOTA).
QUOTA_REASONS = ("quota", "exceeds_quota")
if not set(QUOTA_REASONS) <= set(PENDING_REASONS):
    raise TypeError("models/job.py QUOTA_REASONS must be PENDING_REASONS")


class Job(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A job as the API returns it. Required fields are always emitted; the others are omitted
    when empty, so the JSON never holds a null (the Rust agent drops a poll response with one).

    The fields are in the order of the original's Go struct (CONTRACT 2.2), which is the order
    its encoder wrote them: every record the API answers is encoded from this class (or one
    like it without its constraints: models/record.py), whichever code stored it last.

    A new field goes here and nowhere else (docs/ARCHITECTURE.md, "A job's fields"). It
    needs a default, since records in Redis and rows of older snapshot files lack it: its
    type's zero, or None for `X | None` (the wire omits a field at it, as Go's omitempty).
    Its type is one of Kind's; `read_fields` refuses anything else at import."""

    job_id: str
    node_id: str
    instance_id: Annotated[str, SUBMITTED] = ""
    command: Annotated[str, SUBMITTED, SPEC]
    deploy_url: Annotated[str, SUBMITTED, SPEC] = ""
    env_vars: Annotated[dict[str, str], SUBMITTED, SPEC] = {}
    job_type: Annotated[str, SUBMITTED] = ""
    port: Annotated[int, SUBMITTED] = 0
    status: str
    retry_count: int
    exit_code: int | None = None
    stdout: Annotated[str, OUTPUT] = ""
    stderr: Annotated[str, OUTPUT] = ""
    created_at: Timestamp
    running_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    # Ours, after the original's fields: why the scheduler failed the job (ENDINGS).
    failure_reason: str = ""
    # When the job is due: it waits `delayed` until then (a submitted delay, a retry's
    # backoff). Kept once due, as when its last wait ended: a dependency's (the release
    # sets it) or a retry by hand's (the retry's time): the dashboard's wait counts from it.
    run_at: Annotated[Timestamp | None, SUBMITTED] = None
    # Its retry policy; None: the deployment's (MAX_JOB_RETRIES, RETRY_BACKOFF_SECS). With
    # max_retries set, a timeout is retried too (the original never retried one).
    max_retries: Annotated[Retries | None, SUBMITTED] = None
    retry_backoff_secs: Annotated[BackoffSecs | None, SUBMITTED] = None
    # Its place in its node's queue: a poll answers higher priorities first, in submission
    # order within one. 0 (the original's clients never set it) keeps the original's FIFO.
    priority: Annotated[Priority, SUBMITTED] = 0
    # The jobs this one runs after: it waits until every one is done (docs/GUIDE.md, Dependencies).
    after: Annotated[list[str], SUBMITTED, msgspec.Meta(max_length=MAX_AFTER)] = []
    # What it needs of its node (docs/GUIDE.md, Placement): it goes only to a node with that much
    # room, counting what the node's other jobs hold; 0: nothing asked (today's placement).
    cpus: Annotated[int, SUBMITTED] = 0
    memory_mb: Annotated[int, SUBMITTED] = 0
    # Where it may run: each label key with its value, or a list of allowed values
    # (models/labels.py); `node.id` names one node.
    node_selector: Annotated[Selector, SUBMITTED] = {}
    # The schedule that made it (docs/GUIDE.md, Schedules), set by the firing (workers/firing.py);
    # "" for a job submitted otherwise. Not submitted: no request can claim one.
    schedule: str = ""
    # Why it is pending without a node (PENDING_REASONS); "" once placed.
    pending_reason: str = ""
    # The node whose queue it was taken from by an idle node's poll (docs/GUIDE.md, Work
    # stealing); "" for a job where placement (or a move of its own since) put it.
    taken_from: str = ""
    # Who submitted it: the name of the key (models/access_key.py; `admin` for
    # TINYAWS_API_KEY); "" where no key is set. Not submitted: no request can claim one.
    submitted_by: str = ""
    # Who cancelled it (DELETE /jobs/{id}, the Cancel button), and who last retried it by
    # hand, as submitted_by; a retry starts it over, so its cancel is no longer said.
    cancelled_by: str = ""
    retried_by: str = ""
    # How many attempts it made before its last retry by hand, which starts retry_count (and
    # so its retries) over: its attempts are numbered on across retries by hand (`attempt`).
    earlier_attempts: int = 0
    # The namespace it belongs to (models/namespace.py): "" for `default`, which the wire
    # omits. A submit by a key limited to some namespaces puts it in that key's first when it
    # names none; it never changes after.
    namespace: Annotated[str, SUBMITTED] = ""


JOB_FIELDS = read_fields(Job)


def attempt_of(job: Job) -> int:
    """The number of the job's attempt, running or last ended: counted over its whole life,
    retries by hand included (store/scripts/lua/includes/attempts.lua `attempt_of`)."""
    return job.earlier_attempts + job.retry_count + 1


MAX_DELAY_SECS = 366 * 86400
# What a request may say that the job does not keep as such: a delay becomes its run_at.
REQUEST_ONLY = [("delay_secs", Annotated[float, msgspec.Meta(ge=0, le=MAX_DELAY_SECS)], 0.0)]

# The POST /jobs body, also the body of an SQS message and a schedule's template: Job's
# submitted fields, each optional (a field Job requires, such as command, defaults to its zero
# here), and REQUEST_ONLY's. Any other field is refused, naming it (issue 38: a typo such as
# `priorty` was a job at priority 0): the original ignored unknown keys, but every field its
# clients send (CONTRACT 2.2, 7: the CLI, the lambda, SQS producers) is one of these.
JobCreate = msgspec.defstruct(
    "JobCreate",
    [(f.name, f.annotation, f.empty) for f in JOB_FIELDS if f.submitted] + REQUEST_ONLY,
    omit_defaults=True,
    forbid_unknown_fields=True,
    module=__name__,
)


def new_job(request: msgspec.Struct, created_at: str = "", by: Principal = ANYONE) -> Job:
    """A JobCreate as the job it asks for, as the original made it (CONTRACT 2.4): pending,
    no retry yet, submitted `by` that key, in the namespace it names or the key's home
    (OutsideNamespace for one the key is not limited to). job_id and node_id are placeholders the
    create script fills in (it draws both); created_at may be set later, when the job is
    stored (`stamped`)."""
    fields = msgspec.structs.asdict(request)
    for name, _, _ in REQUEST_ONLY:
        fields.pop(name)
    check_namespace(fields["namespace"])
    fields["namespace"] = by.place(fields["namespace"])
    return Job(
        job_id="",
        node_id="",
        status="pending",
        retry_count=0,
        created_at=created_at,
        submitted_by=by.who,
        **fields,
    )


def stamped(job: Job, request: msgspec.Struct, now: float) -> Job:
    """The new job as it is stored at `now`: its creation time, and, due later (a delay_secs
    or run_at in the future), delayed until its run_at. A run_at already past is due now.
    InvalidInput for a run_at that is not RFC 3339, or both ways of saying when."""
    delay: float = getattr(request, "delay_secs", 0.0)
    if delay and job.run_at:
        raise InvalidInput("use run_at or delay_secs, not both")
    if job.after and (delay or job.run_at):
        raise InvalidInput("use after or a delay (run_at, delay_secs), not both")
    due = now + delay if delay else _due(job.run_at) if job.run_at else now
    if due - now > MAX_DELAY_SECS:
        raise InvalidInput("invalid run_at: at most 366 days ahead")
    if due <= now:
        return msgspec.structs.replace(job, created_at=rfc3339(now), run_at=None)
    return msgspec.structs.replace(
        job, created_at=rfc3339(now), run_at=rfc3339(due), status="delayed"
    )


def due_of(job: Job) -> float | None:
    """When a delayed job is due (epoch s); None for a job due already."""
    return parse_rfc3339(job.run_at) if job.status == "delayed" and job.run_at else None


_ZONE = re.compile(r".*T.*(Z|z|[+-]\d\d:\d\d)")


def _due(run_at: str) -> float:
    if not _ZONE.fullmatch(run_at):  # a time without a zone would be the server's local time
        raise InvalidInput(f"invalid run_at {run_at!r}: use RFC 3339 with a zone")
    try:
        return parse_rfc3339(run_at)
    except ValueError:
        raise InvalidInput(f"invalid run_at {run_at!r}: use RFC 3339 with a zone") from None


class JobUpdate(msgspec.Struct):
    """PATCH /jobs/{id} body, as the agent sends it. `node_id` is ours (the Rust agent sends
    none): the reporting node, which makes a repeated claim idempotent and a report from
    another node a conflict."""

    status: str = ""
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    node_id: str = ""


def job_number(job_id: str) -> int | None:
    """N of an id `job-N` under the original's rule (CONTRACT 2.11: `job-` then an unsigned
    base-10 integer), or None. Numbers beyond MAX_JOB_NUMBER count as no number."""
    match = _JOB_N.fullmatch(job_id)
    if match is None:
        return None
    number = int(match.group(1))
    return number if number <= MAX_JOB_NUMBER else None


def validate_create(job: Job) -> None:
    """The original's check on a requested job (`new_job`), then ours (CONTRACT 8.15)."""
    check_no_nul(job)
    if not job.command and not job.deploy_url:
        raise InvalidInput("command or deploy_url is required")
    if job.job_type not in JOB_TYPES:
        raise InvalidInput(f'invalid job_type {job.job_type!r}: use "run" or "service"')
    if not 0 <= job.port <= 65535:
        raise InvalidInput(f"invalid port {job.port}: use 0 to 65535")
    for name in job.env_vars:
        if not ENV_NAME_RE.fullmatch(name):
            raise InvalidInput(f"invalid env_vars name {name!r}: use [A-Za-z_][A-Za-z0-9_]*")
    if job.instance_id:
        check_id("instance_id", job.instance_id)
    if job.deploy_url and not job.deploy_url.lower().startswith(("http://", "https://")):
        raise InvalidInput("invalid deploy_url: use an http:// or https:// URL")
    for job_id in job.after:
        if job_number(job_id) is None:
            raise InvalidInput(f"invalid after: {not_a_job_id(job_id[:64])}")
    if len(set(job.after)) < len(job.after):
        raise InvalidInput("invalid after: a job is named twice")
    if not 0 <= job.cpus <= NODE_CPUS_MAX:
        raise InvalidInput(f"invalid cpus {job.cpus}: use 0 to {NODE_CPUS_MAX}")
    if not 0 <= job.memory_mb <= MEMORY_MB_MAX:
        raise InvalidInput(f"invalid memory_mb {job.memory_mb}: use 0 to {MEMORY_MB_MAX}")
    check_selector(job.node_selector)
    if job.instance_id and asks_fit(job):
        raise InvalidInput("invalid node_selector: an instance's job runs on its instance's node")


def check_no_nul(job: Job) -> None:
    """No submitted text holds a NUL byte. The agent hands them to a process (the command,
    its environment) or a path (deploy_url, instance_id), which are C strings there: a NUL
    failed the job at spawn, with a traceback and a retry burnt. Every submitted field, so a
    new one is covered too: POST /jobs, a schedule's template and an SQS message alike."""
    for field in JOB_FIELDS:
        if field.submitted:
            for said, text in _texts(field.name, getattr(job, field.name)):
                if "\x00" in text:
                    raise InvalidInput(f"invalid {said}: must not contain NUL bytes")


def _texts(name: str, value: object) -> Iterator[tuple[str, str]]:
    """Each text a field's value holds, with how an error names it."""
    if isinstance(value, str):
        yield name, value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(name, item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{name} key", key
            yield from _texts(f"{name} value of {key[:64]!r}", item)


def asks_fit(job: Job) -> bool:
    """Whether the job asks anything of its node beyond a slot (resources, labels): such a
    job is placed by fit (docs/GUIDE.md, Placement), with the built-in registry only."""
    return bool(job.cpus or job.memory_mb or job.node_selector)


def cancelled_on_purpose(job: Job) -> bool:
    """A failed job that was cancelled: a retry of the failed ones (the CLI's `retry
    --failed`, the UI's button) leaves it alone unless asked, as it was stopped on purpose."""
    return job.failure_reason == ENDINGS["cancelled"][1]


def validate_update(req: JobUpdate) -> None:
    if req.exit_code is not None and not INT32_MIN <= req.exit_code <= INT32_MAX:
        raise InvalidInput(f"invalid exit_code {req.exit_code}: must fit in 32 bits")
    if req.node_id:
        check_id("node_id", req.node_id)


TRUNCATION_MARKER = "\n[output truncated by the scheduler: {dropped} bytes dropped]\n"


def bound_output(text: str, limit: int) -> str:
    """Keep at most `limit` bytes of UTF-8, plus a visible marker saying how much was cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    kept = raw[:limit].decode(errors="ignore")
    return kept + TRUNCATION_MARKER.format(dropped=len(raw) - len(kept.encode()))


job_decoder = msgspec.json.Decoder(Job)
encoder = msgspec.json.Encoder()
# Job records: Go's encoder writes a map's keys sorted (env_vars), and struct fields in
# declaration order, which "deterministic" keeps.
record_encoder = msgspec.json.Encoder(order="deterministic")


# An env var's value as a reader sees it (models/access_key.py): that it is set, not what.
HIDDEN = "(hidden)"


def hide_env(fields: dict[str, Any]) -> dict[str, Any]:
    """A job's fields (or a job template's) with env_vars' values hidden, their names kept."""
    env = fields.get("env_vars")
    return {**fields, "env_vars": dict.fromkeys(env, HIDDEN)} if env else fields


class _Namespace(msgspec.Struct):
    namespace: str = ""


_namespace_decoder = msgspec.json.Decoder(_Namespace)


def seen_by(caller: Principal, job: bytes) -> bool:
    """Whether the job of this JSON (a record, a template) is `caller`'s to see: of a
    namespace its key is limited to. Nothing is decoded for a caller that sees every
    namespace (the admin key, a key limited to none, no key set)."""
    return not caller.namespaces or caller.sees(_namespace_decoder.decode(job).namespace)


def shown_to(caller: Principal, job: bytes) -> bytes:
    """A job's JSON as `caller` may see it: a reader's with env_vars' values hidden."""
    if caller.sees_secrets:
        return job
    return msgspec.json.encode(hide_env(msgspec.json.decode(job)))

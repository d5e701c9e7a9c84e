"""Wire models (CONTRACT 2.2), their decoding rules and the wire format of timestamps.

Request bodies are decoded the way the original's Go `encoding/json` did, because its clients
rely on that: keys match case-insensitively, unknown keys are ignored, `null` for a field means
"absent", a literal `null` body is an empty request, and anything after the first JSON value is
ignored. Then our own validation runs, which the original did not have.

`Job` is the one declaration of a job's fields. Everything else that handles every field
reads them from it through `JOB_FIELDS`: the request struct `JobCreate`, the snapshot's
columns and restore (snapshot/db.py), the Lua record encoder (store/scripts/library.py), the
UI's job page (api/ui.py), and the tests' sample records.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import msgspec
import msgspec.inspect as mi

# "." and ".." are excluded: ids end up in URL paths (the registry's /instances/{id}).
ID_RE = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
JOB_TYPES = ("", "run", "service")
# cancelling: a running job asked to stop (DELETE /jobs/{id}); its agent kills it and reports
# cancelled, or the sweep cancels it CANCEL_GRACE_SECS later.
STATUSES = ("pending", "running", "done", "failed", "cancelling", "cancelled")
REPORT_STATUSES = ("running", "done", "failed", "cancelled")
FINAL_STATUSES = ("done", "failed", "cancelled")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Go decodes into int (64 bits): a larger number is a decode error there, and here.
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]

# Facts about a Job field beyond its name, type and default, read back by JOB_FIELDS.
# A client may set the field on submit (the POST /jobs body, an SQS message).
SUBMITTED = msgspec.Meta(extra={"submitted": True})
# RFC 3339 UTC text (see rfc3339 below).
Timestamp = Annotated[str, msgspec.Meta(extra={"timestamp": True})]


class Job(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A job as the API returns it. Required fields are always emitted; the others are omitted
    when empty, so the JSON never holds a null (the Rust agent drops a poll response with one).

    The fields are in the order of the original's Go struct (CONTRACT 2.2), which is the order
    its encoder wrote them: every encoder of a record (msgspec here, the Lua `encode` of the
    scripts, generated from this class) keeps it, so a record's bytes do not depend on which
    code wrote it last.

    A new field goes here and nowhere else (docs/ARCHITECTURE.md, "A job's fields"). It
    needs a default, since records in Redis and rows of older snapshot files lack it: its
    type's zero, or None for `X | None` (the wire omits a field at it, as Go's omitempty).
    Its type is one of Kind's; `read_fields` refuses anything else at import."""

    job_id: str
    node_id: str
    instance_id: Annotated[str, SUBMITTED] = ""
    command: Annotated[str, SUBMITTED]
    deploy_url: Annotated[str, SUBMITTED] = ""
    env_vars: Annotated[dict[str, str], SUBMITTED] = {}
    job_type: Annotated[str, SUBMITTED] = ""
    port: Annotated[int, SUBMITTED] = 0
    status: str
    retry_count: int
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    created_at: Timestamp
    running_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class Kind(enum.Enum):
    """What a Job field holds: it decides the field's snapshot column and how the restore
    reads it back. The values name the annotations that give each kind."""

    TEXT = "str"
    INT = "int"
    TIMESTAMP = "Timestamp"
    OBJECT = "dict[str, str]"


@dataclass(frozen=True, slots=True)
class JobField:
    """A field of Job, as JOB_FIELDS reads it from the declaration."""

    name: str
    annotation: Any  # as declared (with its Annotated metadata), for derived structs
    kind: Kind
    nullable: bool  # `X | None`: None is "absent", unlike the zero (exit_code 0 is emitted)
    required: bool  # no default: always on the wire, even when empty
    submitted: bool

    @property
    def empty(self) -> Any:
        """The field's default (None, or its type's zero for a field without one): what a
        record or snapshot row lacking the field holds."""
        if self.nullable:
            return None
        return {Kind.INT: 0, Kind.OBJECT: {}}.get(self.kind, "")


def _strip(t: mi.Type, extra: dict[str, Any]) -> mi.Type:
    while isinstance(t, mi.Metadata):
        extra.update(t.extra or {})
        t = t.type
    return t


def _kind(t: mi.Type, extra: dict[str, Any]) -> Kind | None:
    if isinstance(t, mi.StrType):
        return Kind.TIMESTAMP if extra.get("timestamp") else Kind.TEXT
    if isinstance(t, mi.IntType):
        return Kind.INT
    if isinstance(t, mi.DictType) and t.key_type == t.value_type == mi.StrType():
        return Kind.OBJECT
    return None


def _job_field(name: str, info: mi.Field, annotation: Any) -> JobField:
    extra: dict[str, Any] = {}
    t = _strip(info.type, extra)
    members = t.types if isinstance(t, mi.UnionType) else (t,)
    kept = [m for m in members if not isinstance(m, mi.NoneType)]
    kind = _kind(_strip(kept[0], extra), extra) if len(kept) == 1 else None
    if kind is None:
        kinds = ", ".join(k.value for k in Kind)
        raise TypeError(f"{name}: use one of {kinds}, or one of them | None")
    nullable = len(kept) < len(members)
    submitted = bool(extra.get("submitted"))
    field = JobField(info.name, annotation, kind, nullable, info.required, submitted)
    factory = info.default_factory
    default = info.default if factory is msgspec.NODEFAULT else factory()
    # msgspec omits a field at its default, the Lua encoder at its type's zero (as Go's
    # omitempty did): they agree only when the two are the same. And a null is never
    # written, so an `X | None` field cannot be required.
    if (nullable or not info.required) and default != field.empty:
        raise TypeError(f"{name}: the default must be {field.empty!r}")
    return field


def read_fields(cls: type[msgspec.Struct]) -> tuple[JobField, ...]:
    """The fields of `cls` (Job), in order; TypeError for one that breaks the rules above."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    declared = msgspec.structs.fields(cls)
    return tuple(
        _job_field(f"{cls.__name__}.{f.name}", f, d.type)
        for f, d in zip(info.fields, declared, strict=True)
    )


JOB_FIELDS = read_fields(Job)

# The POST /jobs body, also the body of an SQS message: Job's submitted fields, each optional
# (a field Job requires, such as command, defaults to its zero here).
JobCreate = msgspec.defstruct(
    "JobCreate",
    [(f.name, f.annotation, f.empty) for f in JOB_FIELDS if f.submitted],
    omit_defaults=True,
    module=__name__,
)


def new_job(request: msgspec.Struct, created_at: str = "") -> Job:
    """A JobCreate as the job it asks for, as the original made it (CONTRACT 2.4): pending,
    no retry yet. job_id and node_id are placeholders the create script fills in (it draws
    both); created_at may be set later, when the job is stored."""
    fields = msgspec.structs.asdict(request)
    return Job(
        job_id="", node_id="", status="pending", retry_count=0, created_at=created_at, **fields
    )


_PLACEHOLDERS = b'{"job_id":"","node_id":"",'


def creation_json(job: Job) -> bytes:
    """ARGV[1] of the create script (store/scripts.py CREATE_JOB): the job's record without
    job_id and node_id, in Job's order; the script writes those two in front of the rest."""
    record = record_encoder.encode(job)
    assert record.startswith(_PLACEHOLDERS), record[: len(_PLACEHOLDERS)]
    return b"{" + record[len(_PLACEHOLDERS) :]


class JobUpdate(msgspec.Struct):
    """PATCH /jobs/{id} body, as the agent sends it. `node_id` is ours (the Rust agent sends
    none): the reporting node, which makes a repeated claim idempotent and a report from
    another node a conflict."""

    status: str = ""
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    node_id: str = ""


class NodeRegistration(msgspec.Struct):
    id: str = ""
    hostname: str = ""
    cpu_count: Int64 = 0
    role: str = ""
    addr: str = ""


class Heartbeat(msgspec.Struct):
    id: str = ""


class Node(msgspec.Struct):
    """A node as the registry reports it (GET /nodes values); every field is emitted."""

    id: str
    hostname: str = ""
    addr: str = ""
    cpu_count: int = 0
    role: str = ""
    status: str = ""
    last_seen: str = ""


class NodeStatus(msgspec.Struct):
    """The part of a registry node the scheduler reads (CONTRACT 2.6)."""

    id: str = ""
    role: str = ""
    status: str = ""


class Instance(msgspec.Struct):
    id: str = ""
    node_id: str = ""
    status: str = ""


class ServiceCreate(msgspec.Struct):
    """POST /services, as the Rust agent registers a service it started (CONTRACT 3.4)."""

    node_id: str = ""
    instance_id: str = ""
    port: Int64 = 0
    pid: Int64 = 0
    deploy_url: str = ""


class Service(msgspec.Struct):
    """A service as the registry reports it (CONTRACT 4.2); every field is emitted, `id` first
    (the create script fills it in)."""

    id: str
    instance_id: str
    node_id: str
    port: int
    pid: int
    status: str
    deploy_url: str
    created_at: str


class ServiceUpdate(msgspec.Struct):
    status: str = ""


# A service status is a word (running, stopped, crashed, done, ...): the original registry
# took any non-empty string; ours keeps it short and plain.
SERVICE_STATUS_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")


def validate_service(req: ServiceCreate) -> None:
    if not req.node_id:
        raise InvalidInput("node_id required")
    check_id("node_id", req.node_id)
    if req.instance_id:
        check_id("instance_id", req.instance_id)
    if not 0 <= req.port <= 65535:
        raise InvalidInput(f"invalid port {req.port}: use 0 to 65535")
    if not 0 <= req.pid <= 2**31 - 1:
        raise InvalidInput(f"invalid pid {req.pid}")
    if len(req.deploy_url) > 2048 or not req.deploy_url.isprintable():
        raise InvalidInput("invalid deploy_url: at most 2048 printable characters")


class DecodeError(ValueError):
    """The body is not what the route expects; `detail` says where."""


class InvalidInput(ValueError):
    """The body decoded but a value is not acceptable; the message names the field."""


S = TypeVar("S", bound=msgspec.Struct)

_any_json = msgspec.json.Decoder()
_go_fallback = json.JSONDecoder()


def _first_value(body: bytes) -> Any:
    try:
        return _any_json.decode(body)
    except RecursionError:
        raise DecodeError("JSON nested too deeply") from None
    except msgspec.DecodeError as exc:
        if "trailing characters" not in str(exc):
            raise DecodeError(str(exc)) from None
    # Go's json.Decoder reads one value and leaves the rest; only this rare path pays for it.
    try:
        text = body.decode()
        value, _ = _go_fallback.raw_decode(text, len(text) - len(text.lstrip()))
    except RecursionError:
        raise DecodeError("JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(str(exc)) from None
    return value


def decode_go_style(body: bytes, kind: type[S]) -> S:
    """Decode a request body into `kind` with the original's Go leniency (see module doc)."""
    value = _first_value(body)
    if value is None:
        return kind()
    if not isinstance(value, dict):
        raise DecodeError(f"expected a JSON object, got {type(value).__name__}")
    folded = {str(k).lower(): v for k, v in value.items() if v is not None}
    try:
        return msgspec.convert(folded, kind, strict=True)
    except RecursionError:
        raise DecodeError("JSON nested too deeply") from None
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc)) from None


def check_id(field: str, value: str) -> None:
    if not ID_RE.fullmatch(value):
        raise InvalidInput(f"invalid {field}: use 1 to 128 of A-Z a-z 0-9 . _ -")


def validate_create(job: Job) -> None:
    """The original's check on a requested job (`new_job`), then ours (CONTRACT 8.15)."""
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


NODE_ROLES = ("", "compute", "storage")
# Every field of a registration is bounded: nodes live in Redis and in every GET /nodes.
NODE_TEXT_MAX, NODE_CPUS_MAX = 255, 65_536


def validate_registration(reg: NodeRegistration) -> None:
    check_id("id", reg.id)
    if reg.role not in NODE_ROLES:
        raise InvalidInput(f"invalid role {reg.role!r}: use compute or storage")
    for field, value in (("hostname", reg.hostname), ("addr", reg.addr)):
        if len(value) > NODE_TEXT_MAX or not value.isprintable():
            raise InvalidInput(f"invalid {field}: at most {NODE_TEXT_MAX} printable characters")
    if not 0 <= reg.cpu_count <= NODE_CPUS_MAX:
        raise InvalidInput(f"invalid cpu_count {reg.cpu_count}: use 0 to {NODE_CPUS_MAX}")


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
jobs_decoder = msgspec.json.Decoder(list[Job])
encoder = msgspec.json.Encoder()
# Job records: Go's encoder writes a map's keys sorted (env_vars), and struct fields in
# declaration order, which "deterministic" keeps.
record_encoder = msgspec.json.Encoder(order="deterministic")


# Timestamps on the wire: RFC 3339, UTC, `Z` suffix (CONTRACT 2.2).
# (second, its formatted text): one tuple, swapped whole, so threads never see half of it.
_last_second: list[tuple[int, str]] = [(-1, "")]


def rfc3339(epoch: float) -> str:
    """Microsecond precision; the original's clients accept any fraction, or none."""
    second, micros = divmod(round(epoch * 1_000_000), 1_000_000)
    # strftime is a visible share of a submit's CPU; the seconds part changes once a second.
    cached = _last_second[0]
    if cached[0] != second:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        cached = _last_second[0] = (second, text)
    return f"{cached[1]}.{micros:06d}Z"


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of a timestamp in any RFC 3339 form the original wrote (with or without a
    fraction, `Z` or an offset, up to nanoseconds)."""
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        frac, zone = rest[:digits], rest[digits:]
        text = f"{head}.{frac[:6].ljust(6, '0')}{zone}"
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

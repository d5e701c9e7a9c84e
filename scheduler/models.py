"""Wire models (CONTRACT 2.2), their decoding rules and the wire format of timestamps.

Request bodies are decoded the way the original's Go `encoding/json` did, because its clients
rely on that: keys match case-insensitively, unknown keys are ignored, `null` for a field means
"absent", a literal `null` body is an empty request, and anything after the first JSON value is
ignored. Then our own validation runs, which the original did not have.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import msgspec

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


class Job(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A job as the API returns it. Required fields are always emitted; the others are omitted
    when empty, so the JSON never holds a null (the Rust agent drops a poll response with one).

    The fields are in the order of the original's Go struct (CONTRACT 2.2), which is the order
    its encoder wrote them: every encoder of a record (msgspec here, the Lua `encode` of the
    scripts, generated from this class) keeps it, so a record's bytes do not depend on which
    code wrote it last."""

    job_id: str
    node_id: str
    instance_id: str = ""
    command: str
    deploy_url: str = ""
    env_vars: dict[str, str] = {}
    job_type: str = ""
    port: int = 0
    status: str
    retry_count: int
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    created_at: str
    running_at: str | None = None
    finished_at: str | None = None


class JobCreate(msgspec.Struct, omit_defaults=True):
    """POST /jobs body, also the body of an SQS message."""

    command: str = ""
    instance_id: str = ""
    deploy_url: str = ""
    env_vars: dict[str, str] = {}
    job_type: str = ""
    port: int = 0


class NewJob(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A job as the create script receives it: the wire fields but job_id and node_id, which
    the script fills in (it draws the id and the round-robin node), in Job's order."""

    instance_id: str = ""
    command: str
    deploy_url: str = ""
    env_vars: dict[str, str] = {}
    job_type: str = ""
    port: int = 0
    status: str
    retry_count: int
    created_at: str

    @classmethod
    def from_request(cls, req: JobCreate, created_at: str) -> NewJob:
        return cls(
            command=req.command,
            status="pending",
            retry_count=0,
            created_at=created_at,
            instance_id=req.instance_id,
            deploy_url=req.deploy_url,
            job_type=req.job_type,
            port=req.port,
            env_vars=req.env_vars,
        )


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


def validate_create(req: JobCreate) -> None:
    """Our checks on a job request, beyond the original's (CONTRACT 8.15)."""
    if req.job_type not in JOB_TYPES:
        raise InvalidInput(f'invalid job_type {req.job_type!r}: use "run" or "service"')
    if not 0 <= req.port <= 65535:
        raise InvalidInput(f"invalid port {req.port}: use 0 to 65535")
    for name in req.env_vars:
        if not ENV_NAME_RE.fullmatch(name):
            raise InvalidInput(f"invalid env_vars name {name!r}: use [A-Za-z_][A-Za-z0-9_]*")
    if req.instance_id:
        check_id("instance_id", req.instance_id)
    if req.deploy_url and not req.deploy_url.lower().startswith(("http://", "https://")):
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

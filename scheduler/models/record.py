"""A job's record as Redis keeps it: whole while small, its large parts apart, so no script
ever reads bytes in proportion to what a job holds.

Redis copies and hashes every byte of a string that enters or leaves a Lua script (about
1.25 µs a KiB: benchmarks/large_job_cost.py), so a script may only ever see a bounded record.
A job's *parts* are its spec (the SPEC fields: command, deploy_url, env_vars, written once at
submit) and each OUTPUT field (stdout, stderr, written by reports). A part of at most
INLINE_BYTES stays in the record, the *head* `{P}:job:{id}` (store/records.py); a larger
one is stored apart, in a key of its own (the spec as JSON, an output as its plain text),
and the head names it in its `_parts` map (with the output's SHA-1). The
scripts decode the head only; a part apart reaches Redis by plain commands (written to a
staged key the script renames, read by an MGET of its key), never through a script.

`split` cuts a whole record into head and parts apart (the submit, the restore); `assemble`
puts them back into the wire's bytes (every reader), in Job's order with empty fields
omitted, as one encoder of the whole job writes them: a head a script wrote is cjson's, in
no order (store/scripts/lua/includes/encode.lua says why).
"""

from __future__ import annotations

import functools
import hashlib
import operator
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from scheduler.models.job import JOB_FIELDS, Job, record_encoder

SPEC_FIELDS = tuple(f.name for f in JOB_FIELDS if f.part == "spec")
OUTPUT_FIELDS = tuple(f.name for f in JOB_FIELDS if f.part == "output")
WIRE_ORDER = tuple(f.name for f in JOB_FIELDS)
_KNOWN = frozenset(WIRE_ORDER)
# The largest part kept in the head: what a script may copy, at most ~5 µs of Redis each.
INLINE_BYTES = 4096
# The head's map of its parts stored apart ("spec", "stdout", "stderr") to the SHA-1 of each
# output's text ("" for the spec): a repeated report is compared by it, never read. Not a Job
# field, never on the wire.
APART = "_parts"
_APART_MARK = b'"_parts":'
# The values a job's parts are read as (store/records.py job_parts): head, spec, outputs.
PART_COUNT = 2 + len(OUTPUT_FIELDS)
NO_OUTPUTS: tuple[None, ...] = (None,) * len(OUTPUT_FIELDS)

_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_text_decoder = msgspec.json.Decoder(str)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Parts:
    """A record as stored: its head's JSON, its spec's JSON when stored apart (else b""),
    and each output's text when stored apart (else ""), in OUTPUT_FIELDS' order."""

    head: bytes
    spec: bytes
    outputs: tuple[str, ...]


def split(record: bytes) -> Parts:
    """The head and parts apart of a whole record (the wire's JSON of a job, as msgspec or
    an earlier version wrote it). ValueError for one that is not a JSON object."""
    try:
        fields = _fields_decoder.decode(record)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a job record: {exc}") from None
    apart: dict[str, str] = {}
    spec_fields = {name: fields[name] for name in SPEC_FIELDS if name in fields}
    spec = _encoder.encode(spec_fields) if spec_fields else b""
    if len(spec) > INLINE_BYTES:
        apart["spec"] = ""
        for name in spec_fields:
            del fields[name]
    else:
        spec = b""
    outputs = []
    for name in OUTPUT_FIELDS:
        raw = fields.get(name)
        text = "" if raw is None or len(raw) <= INLINE_BYTES else _text_decoder.decode(raw)
        if is_large(text):
            apart[name] = digest(text)
            del fields[name]
            outputs.append(text)
        else:
            outputs.append("")
    if apart:
        fields[APART] = msgspec.Raw(_encoder.encode(apart))
    head = _encoder.encode(fields) if apart else record
    return Parts(head, spec, tuple(outputs))


def is_large(text: str) -> bool:
    """Whether an output is kept apart: its UTF-8 text is over INLINE_BYTES (a report's is
    staged by the same rule: store/records.py large_outputs)."""
    return len(text) > INLINE_BYTES // 4 and len(text.encode()) > INLINE_BYTES


def digest(text: str) -> str:
    """How a head names an output stored apart: the SHA-1 of its text (store/records.py
    computes it for a staged one)."""
    return hashlib.sha1(text.encode()).hexdigest()


def has_apart(head: bytes) -> bool:
    """Whether a stored head names parts stored apart (its readers must read them too). May
    say yes for a head that does not (the text inside a value): `assemble` reads it right."""
    return _APART_MARK in head


def _plain(annotation: Any) -> Any:
    """A field's type without its constraints: a stored record is read as it is (an earlier
    or later version may have allowed other values)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _plain(args[0])
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_plain(arg) for arg in args))
    if origin in (list, dict):
        return origin[tuple(_plain(arg) for arg in args)]
    return annotation


# Job's fields as a record holds them, refusing a field Job lacks (a newer version's, the
# parts apart): such a head takes the slower path of `assemble`. Encoded as Job is.
_WireJob = msgspec.defstruct(
    "_WireJob",
    [
        (f.name, _plain(f.annotation)) if f.required else (f.name, _plain(f.annotation), f.empty)
        for f in JOB_FIELDS
    ],
    kw_only=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
)
_strict_decoder = msgspec.json.Decoder(_WireJob)
_values_decoder = msgspec.json.Decoder(dict[str, Any])


def assemble(head: bytes, spec: bytes | None, outputs: Sequence[bytes | None]) -> bytes:
    """The wire's JSON of a job from its head (as msgspec or a script's cjson wrote it: any
    order) and its parts apart as Redis returns them (None: absent): Job's fields in Job's
    order, empty ones omitted, map keys sorted, then any fields beyond Job's, sorted."""
    if spec is None and not any(outputs):
        try:
            return record_encoder.encode(_strict_decoder.decode(head))
        except msgspec.ValidationError:
            pass  # a field Job lacks
    fields = _values_decoder.decode(head)
    fields.pop(APART, None)
    if spec:
        fields.update(_values_decoder.decode(spec))
    for name, text in zip(OUTPUT_FIELDS, outputs, strict=True):
        if text:
            fields[name] = str(text, "utf-8")
    known = {name: value for name, value in fields.items() if name in _KNOWN}
    record = record_encoder.encode(msgspec.convert(known, _WireJob))
    extra = {name: fields[name] for name in sorted(fields.keys() - _KNOWN)}
    if not extra:
        return record
    return record[:-1] + b"," + record_encoder.encode(extra)[1:]


def wire(head: bytes, spec: bytes | None = None) -> bytes:
    """The wire's JSON of a job whose head names no output apart (a new job's: its spec
    apart, if any, is `spec`)."""
    return assemble(head, spec, NO_OUTPUTS)


def records(flat: Sequence[bytes | None]) -> list[bytes]:
    """The records of a flat reply of PART_COUNT values a job (head, spec, outputs...), the
    jobs whose head was missing left out."""
    out = []
    for i in range(0, len(flat), PART_COUNT):
        head = flat[i]
        if head is not None:
            out.append(assemble(head, flat[i + 1], flat[i + 2 : i + PART_COUNT]))
    return out


def record(parts: Sequence[bytes | None]) -> bytes | None:
    """The record of one job's parts as read (store/records.py job_parts), None when it has
    no head."""
    found = records(parts)
    return found[0] if found else None


def is_whole(head: bytes) -> bool:
    """Whether a stored head holds a part larger than INLINE_BYTES, as versions before parts
    were kept apart wrote it (the upgrade splits it: ops.upkeep.split_records)."""
    try:
        return split(head).head != head
    except ValueError:
        return False  # not a record: the snapshot reports it


_PLACEHOLDERS = b'{"job_id":"","node_id":"",'


def creation_parts(job: Job) -> Parts:
    """The create script's parts of a new job (store/scripts/create.py CREATE_JOB): its head
    without job_id and node_id, which the script writes in front of the rest, and its spec
    when stored apart. ValueError for a job whose id or node is set already."""
    parts = split(record_encoder.encode(job))
    if not parts.head.startswith(_PLACEHOLDERS):
        raise ValueError(f"not a new job's record: {parts.head[: len(_PLACEHOLDERS)]!r}")
    head = b"{" + parts.head[len(_PLACEHOLDERS) :]
    return Parts(head, parts.spec, parts.outputs)

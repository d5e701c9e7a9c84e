"""A job's record as Redis keeps it: in parts, so no script ever decodes what may be large.

The wire's job (`Job`) is one JSON object; Redis holds it as up to four values
(store/records.py `job_parts`):

- the head: every field but the parts below, as JSON in Job's order (what the scripts
  decode and re-encode, a few hundred bytes whatever the job holds);
- the spec: the SPEC fields (command, deploy_url, env_vars) as one JSON object, written once
  at submit and never changed (absent when all are empty);
- stdout and stderr: each OUTPUT field as its plain text (absent when empty), written by a
  report or a script as they come, read in part by the scripts (GETRANGE, a tail).

`split` cuts a whole record into those parts (the submit, the restore); `assemble` puts them
back into the wire's bytes (every read), in Job's order with empty fields omitted, as one
record was written before. A head written before the split holds every field itself:
`assemble` reads it as it is, a part present overriding its field (docs/ARCHITECTURE.md,
Records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from scheduler.models.job import JOB_FIELDS, Job, record_encoder

SPEC_FIELDS = tuple(f.name for f in JOB_FIELDS if f.part == "spec")
OUTPUT_FIELDS = tuple(f.name for f in JOB_FIELDS if f.part == "output")
WIRE_ORDER = tuple(f.name for f in JOB_FIELDS)
_KNOWN = frozenset(WIRE_ORDER)

_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_text_decoder = msgspec.json.Decoder(str)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Parts:
    """A record in its parts: the head's JSON, the spec's JSON (b"" when it has no field),
    and each output's text ("" when empty), in OUTPUT_FIELDS' order."""

    head: bytes
    spec: bytes
    outputs: tuple[str, ...]


def split(record: bytes) -> Parts:
    """The parts of a whole record (the wire's JSON of a job, as msgspec or an earlier
    version wrote it). ValueError for one that is not a JSON object."""
    try:
        fields = _fields_decoder.decode(record)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a job record: {exc}") from None
    spec = {name: fields.pop(name) for name in SPEC_FIELDS if name in fields}
    outputs = tuple(_text(fields.pop(name, None)) for name in OUTPUT_FIELDS)
    return Parts(_encoder.encode(fields), _encoder.encode(spec) if spec else b"", outputs)


def is_whole(head: bytes) -> bool:
    """Whether a stored head is a whole record, as versions before the split wrote it (it
    holds a part's field: every whole record holds its command)."""
    try:
        fields = _fields_decoder.decode(head)
    except msgspec.DecodeError:
        return False  # not a record: the snapshot reports it
    return any(name in fields for name in (*SPEC_FIELDS, *OUTPUT_FIELDS))


def _text(raw: msgspec.Raw | None) -> str:
    return "" if raw is None else _text_decoder.decode(raw)


def assemble(head: bytes, spec: bytes | None, outputs: Sequence[bytes | None]) -> bytes:
    """The wire's JSON of a job from its parts as Redis returns them (None: absent)."""
    fields = _fields_decoder.decode(head)
    if spec:
        fields.update(_fields_decoder.decode(spec))
    for name, text in zip(OUTPUT_FIELDS, outputs, strict=True):
        if text:
            fields[name] = msgspec.Raw(_encoder.encode(str(text, "utf-8")))
    ordered = {name: fields[name] for name in WIRE_ORDER if name in fields}
    # Fields beyond Job's (a newer version's, kept through a restore) follow, sorted.
    for name in sorted(fields.keys() - _KNOWN):
        ordered[name] = fields[name]
    return _encoder.encode(ordered)


_PLACEHOLDERS = b'{"job_id":"","node_id":"",'


def creation_parts(job: Job) -> Parts:
    """The create script's parts of a new job (store/scripts/create.py CREATE_JOB): its head
    without job_id and node_id, which the script writes in front of the rest, and its spec.
    ValueError for a job whose id or node is set already."""
    parts = split(record_encoder.encode(job))
    if not parts.head.startswith(_PLACEHOLDERS):
        raise ValueError(f"not a new job's record: {parts.head[: len(_PLACEHOLDERS)]!r}")
    head = b"{" + parts.head[len(_PLACEHOLDERS) :]
    return Parts(head, parts.spec, parts.outputs)


# The values a job's parts are read as (store/records.py job_parts).
PART_COUNT = 2 + len(OUTPUT_FIELDS)


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

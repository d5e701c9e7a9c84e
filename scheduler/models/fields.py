"""A job's fields as read from their one declaration (job.Job): what each holds (Kind),
whether it is optional, and the facts a field carries beyond its name, type and default
(SUBMITTED, Timestamp), read through msgspec.inspect."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import msgspec.inspect as mi

# Facts about a Job field beyond its name, type and default, read back by read_fields.
# A client may set the field on submit (the POST /jobs body, an SQS message).
SUBMITTED = msgspec.Meta(extra={"submitted": True})
# Kept apart from the job's record (models/record.py): written once at submit (SPEC: the
# command and what it runs with), or an output an agent reports (OUTPUT), any size up to the
# limits. The scripts never decode either, so a transition costs the same for any job.
SPEC = msgspec.Meta(extra={"part": "spec"})
OUTPUT = msgspec.Meta(extra={"part": "output"})
# RFC 3339 UTC text (wire.rfc3339).
Timestamp = Annotated[str, msgspec.Meta(extra={"timestamp": True})]


class Kind(enum.Enum):
    """What a Job field holds: it decides the field's snapshot column and how the restore
    reads it back. The values name the annotations that give each kind."""

    TEXT = "str"
    INT = "int"
    TIMESTAMP = "Timestamp"
    OBJECT = "dict[str, str]"
    LIST = "list[str]"
    # A map whose values are a str or a list of them (a node selector): JSON like OBJECT.
    SELECTOR = "dict[str, str | list[str]]"


@dataclass(frozen=True, slots=True)
class JobField:
    """A field of Job, as JOB_FIELDS reads it from the declaration."""

    name: str
    annotation: Any  # as declared (with its Annotated metadata), for derived structs
    kind: Kind
    nullable: bool  # `X | None`: None is "absent", unlike the zero (exit_code 0 is emitted)
    required: bool  # no default: always on the wire, even when empty
    submitted: bool
    part: str = ""  # "spec" or "output" (SPEC, OUTPUT), "" for the record's head

    @property
    def empty(self) -> Any:
        """The field's default (None, or its type's zero for a field without one): what a
        record or snapshot row lacking the field holds."""
        if self.nullable:
            return None
        return {Kind.INT: 0, Kind.OBJECT: {}, Kind.LIST: [], Kind.SELECTOR: {}}.get(self.kind, "")


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
    if isinstance(t, mi.ListType) and _strip(t.item_type, {}) == mi.StrType():
        return Kind.LIST
    if isinstance(t, mi.DictType) and t.key_type == mi.StrType() and _is_str_or_list(t.value_type):
        return Kind.SELECTOR
    return None


def _is_str_or_list(t: mi.Type) -> bool:
    members = t.types if isinstance(t, mi.UnionType) else ()
    return set(map(type, members)) == {mi.StrType, mi.ListType} and all(
        isinstance(m, mi.StrType) or _strip(m.item_type, {}) == mi.StrType()  # type: ignore[attr-defined]
        for m in members
    )


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
    part = str(extra.get("part", ""))
    field = JobField(info.name, annotation, kind, nullable, info.required, submitted, part)
    factory = info.default_factory
    default = info.default if factory is msgspec.NODEFAULT else factory()
    # msgspec omits a field at its default, and Go's omitempty at its type's zero: the wire
    # is Go's only when the two are the same. And a null is never written, so an `X | None`
    # field cannot be required.
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

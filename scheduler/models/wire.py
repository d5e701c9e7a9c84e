"""The wire's rules: request bodies decoded as the original's Go `encoding/json` did, ids,
and the wire format of timestamps.

Request bodies are decoded the way the original's Go `encoding/json` did, because its clients
rely on that: keys match case-insensitively, unknown keys are ignored (but where the struct
forbids them: a job request, whose fields the original's clients all send as known ones),
`null` for a field means "absent", a literal `null` body is an empty request, and anything
after the first JSON value is ignored. Then our own validation runs, which the original did
not have. A body refused says which field and what it must be (models/rules.py).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, TypeVar

import msgspec

from scheduler.models.rules import NESTED_TOO_DEEPLY, explain, not_an_object, not_json

# "." and ".." are excluded: ids end up in URL paths (the registry's /instances/{id}).
ID_RE = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}")
# An Idempotency-Key (POST /jobs, POST /jobs/batch): the API refuses any other (400), and the
# CLI refuses one before sending it (IDEMPOTENCY_KEY_RULE says the rule, naming `most`).
IDEMPOTENCY_KEY_MAX = 255
IDEMPOTENCY_KEY_RE = re.compile(rf"[\x21-\x7e]{{1,{IDEMPOTENCY_KEY_MAX}}}")
IDEMPOTENCY_KEY_RULE = "use 1 to {most} visible ASCII characters"
# Go decodes into int (64 bits): a larger number is a decode error there, and here.
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class DecodeError(ValueError):
    """The body is not what the route expects; the message says which field and what it
    must be (`priority: must be an integer between -1000 and 1000`)."""


class InvalidInput(ValueError):
    """The body decoded but a value is not acceptable; the message names the field."""


S = TypeVar("S", bound=msgspec.Struct)

_any_json = msgspec.json.Decoder()
_go_fallback = json.JSONDecoder()


def _first_value(body: bytes) -> Any:
    try:
        return _any_json.decode(body)
    except RecursionError:
        raise DecodeError(NESTED_TOO_DEEPLY) from None
    except msgspec.DecodeError as exc:
        if "trailing characters" not in str(exc):
            raise DecodeError(not_json(exc, body)) from None
    # Go's json.Decoder reads one value and leaves the rest; only this rare path pays for it.
    try:
        text = body.decode()
        value, _ = _go_fallback.raw_decode(text, len(text) - len(text.lstrip()))
    except RecursionError:
        raise DecodeError(NESTED_TOO_DEEPLY) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(not_json(exc, body)) from None
    return value


def decode_go_style(body: bytes, kind: type[S], ignored: list[str] | None = None) -> S:
    """Decode a request body into `kind` with the original's Go leniency (see module doc).
    With `ignored` (a list to fill), keys `kind` does not have are dropped and named there
    even where `kind` forbids them: a queue's messages come from producers the scheduler
    does not know, which the original took with their extra keys."""
    value = _first_value(body)
    if value is None:
        return kind()
    if not isinstance(value, dict):
        raise DecodeError(not_an_object(value))
    folded = {str(k).lower(): v for k, v in value.items() if v is not None}
    if ignored is not None:
        known = _field_names(kind)
        ignored.extend(sorted(key for key in folded if key not in known))
        folded = {key: v for key, v in folded.items() if key in known}
    try:
        return msgspec.convert(folded, kind, strict=True)
    except RecursionError:
        raise DecodeError(NESTED_TOO_DEEPLY) from None
    except msgspec.ValidationError as exc:
        raise DecodeError(explain(exc, kind)) from None


@cache
def _field_names(kind: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(field.encode_name for field in msgspec.structs.fields(kind))


def decode_with(decoder: msgspec.json.Decoder[S], body: bytes) -> S:
    """A body decoded as strict JSON by `decoder` (built once, for a Struct: the routes of
    ours, which the original's clients never call), refused as decode_go_style refuses."""
    try:
        return decoder.decode(body)
    except RecursionError:
        raise DecodeError(NESTED_TOO_DEEPLY) from None
    except msgspec.ValidationError as exc:
        raise DecodeError(explain(exc, decoder.type)) from None
    except msgspec.DecodeError as exc:
        raise DecodeError(not_json(exc, body)) from None


def check_id(field: str, value: str) -> None:
    if not ID_RE.fullmatch(value):
        raise InvalidInput(f"invalid {field}: use 1 to 128 of A-Z a-z 0-9 . _ -")


encoder = msgspec.json.Encoder()


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


def not_a_job_id(text: str) -> str:
    """The refusal of `text` where a job's id goes (`after`: the API's, the CLI's --after)."""
    return f"{text!r} is not a job id like job-42"

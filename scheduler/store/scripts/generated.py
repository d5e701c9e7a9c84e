"""The Lua written from Python facts, so the two cannot disagree: each entry defines one name
a script includes like any other (`--- @include "FINAL"`: library.py). Every other line of
the scripts' Lua is in lua/; the return codes are codes.py's CODES, the keys lua_keys.py's."""

from __future__ import annotations

import json
from collections.abc import Iterable

from scheduler.models.attempt import ATTEMPT_TAIL_BYTES, ATTEMPTS_KEPT
from scheduler.models.event import EVENTS_KEPT, EVENTS_TRIM_EVERY
from scheduler.models.fields import Kind
from scheduler.models.job import (
    ENDINGS,
    FINAL_STATUSES,
    JOB_FIELDS,
    MAX_JOB_NUMBER,
    NOT_STARTED,
    PENDING_REASONS,
    QUOTA_REASONS,
    STATUSES,
)
from scheduler.models.labels import NAMESPACE_JOIN, NAMESPACE_LABEL
from scheduler.models.namespace import DEFAULT
from scheduler.models.record import APART, OUTPUT_FIELDS
from scheduler.models.series import WAIT_BOUNDS
from scheduler.store.keys import OTHER_SPACE_KEY, SPACE_KEYS
from scheduler.store.scripts import endings
from scheduler.store.shards import ELSEWHERE, PINNED, SERVICE_ID_PREFIX


def _value(value: object) -> str:
    """`value` as a Lua literal: a number, a string, or a sequence of them as a table."""
    if isinstance(value, tuple | list | frozenset):
        return "{" + ", ".join(_value(item) for item in value) + "}"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _set(names: Iterable[str]) -> str:
    """A table of `names` each true: FINAL[status]."""
    return "{" + ", ".join(f"{name} = true" for name in names) + "}"


def _constants() -> dict[str, str]:
    values: dict[str, object] = {
        # The most digits of a job-N id whose N is read from the id (read.lua number_of): every
        # number of that many digits is below models.MAX_JOB_NUMBER.
        "MAX_JOB_DIGITS": len(str(MAX_JOB_NUMBER)) - 1,
        # The statuses not final: the indexes a deleted node's jobs may still be in (gone.lua).
        "UNFINISHED": tuple(s for s in STATUSES if s not in FINAL_STATUSES),
        # A record's list fields, which encode drops when empty (encode.lua).
        "LIST_FIELDS": tuple(f.name for f in JOB_FIELDS if f.kind is Kind.LIST),
        # The parts of a job's record that may be kept apart (models/record.py; parts.lua).
        "APART": APART,
        "OUTPUTS": OUTPUT_FIELDS,
        # The work units of endings.py.
        "VISIT_UNITS": endings.VISIT_UNITS,
        "ENDED_UNITS": endings.ENDED_UNITS,
        "DEPENDENCY_UNITS": endings.DEPENDENCY_UNITS,
        "SETTLE_UNITS": endings.SETTLE_UNITS,
        "NODE_UNITS": endings.NODE_UNITS,
        "RECORD_BYTES_UNIT": endings.RECORD_BYTES_UNIT,
        # An attempt's output tail and how many attempts a job keeps (models/attempt.py).
        "ATTEMPT_TAIL_BYTES": ATTEMPT_TAIL_BYTES,
        "ATTEMPTS_KEPT": ATTEMPTS_KEPT,
        # The job events kept per shard, whatever their age (models/event.py).
        "EVENTS_KEPT": EVENTS_KEPT,
        "EVENTS_TRIM_EVERY": EVENTS_TRIM_EVERY,
        # The dashboard's wait buckets (models/series.py) and their fields, "wait:<i>".
        "WAIT_BOUNDS": WAIT_BOUNDS,
        "WAIT_FIELDS": tuple(f"wait:{i}" for i in range(len(WAIT_BOUNDS) + 1)),
        # The shards' marks (store/shards.py).
        "ELSEWHERE": ELSEWHERE,
        "PINNED": PINNED,
        "SERVICE_ID_PREFIX": SERVICE_ID_PREFIX,
        # The default namespace's name, the label that dedicates a node to namespaces, and
        # how its value joins the names of those it serves (models/labels.py; room.lua).
        "DEFAULT_NAMESPACE": DEFAULT,
        "NAMESPACE_JOIN": NAMESPACE_JOIN,
        "NAMESPACE_LABEL": NAMESPACE_LABEL,
    }
    return {name: f"local {name} = {_value(value)}" for name, value in values.items()}


def _dedup_key_of() -> str:
    """The key that remembers an idempotency key `key` of `space` (create.py Dedup.redis_key)."""
    choices = "".join(
        f'space == "{space}" and K.{of.__name__}(key) or ' for space, of in SPACE_KEYS.items()
    )
    return (
        "local function dedup_key_of(space, key)\n"
        f"  return {choices}K.{OTHER_SPACE_KEY.__name__}(key)\n"
        "end"
    )


# Every generated definition, by the name it defines.
GENERATED: dict[str, str] = {
    # The final statuses (models.FINAL_STATUSES): FINAL[status] is true for them.
    "FINAL": f"local FINAL = {_set(FINAL_STATUSES)}",
    "NOT_STARTED": f"local NOT_STARTED = {_set(NOT_STARTED)}",
    # ENDINGS[name] is {status, failure_reason} (models.ENDINGS).
    "ENDINGS": "local ENDINGS = {"
    + ", ".join(f"{name} = {_value(ending)}" for name, ending in ENDINGS.items())
    + "}",
    # Why a job waits unplaced (models.PENDING_REASONS): REASON.no_fit is "no_fit".
    "REASON": "local REASON = {" + ", ".join(f'{r} = "{r}"' for r in PENDING_REASONS) + "}",
    # The reasons of a job waiting for its namespace's quota (models.QUOTA_REASONS).
    "QUOTA_WAITS": f"local QUOTA_WAITS = {_set(QUOTA_REASONS)}",
    **_constants(),
    "dedup_key_of": _dedup_key_of(),
}

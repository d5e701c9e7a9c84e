"""An unknown field named as another scheduler names it (`cmd`, `retries`, `depends_on`) is
refused with the field it means: `cmd: unknown field (did you mean command?)`, where close
spellings alone gave no hint (models/rules.py BROUGHT)."""

from __future__ import annotations

import importlib
import pkgutil

import msgspec
import pytest

import scheduler.models
from scheduler.models.job import JobCreate
from scheduler.models.quota import QuotaChange
from scheduler.models.rules import BROUGHT, explain
from scheduler.models.schedule import ScheduleRequest
from scheduler.models.wire import DecodeError, decode_go_style


def refusal(kind: type[msgspec.Struct], name: str) -> str:
    """The refusal of a body of `kind` holding the field `name`."""
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.convert({name: 1}, kind)
    return explain(refused.value, kind)


@pytest.mark.parametrize(
    ("kind", "name", "meant"),
    [
        (JobCreate, "cmd", "command"),
        (JobCreate, "script", "command"),
        (JobCreate, "retries", "max_retries"),
        (JobCreate, "max_attempts", "max_retries"),
        (JobCreate, "backoff", "retry_backoff_secs"),
        (JobCreate, "retry_delay", "retry_backoff_secs"),
        (JobCreate, "env", "env_vars"),
        (JobCreate, "environment", "env_vars"),
        (JobCreate, "delay", "delay_secs"),
        (JobCreate, "countdown", "delay_secs"),
        (JobCreate, "eta", "run_at"),
        (JobCreate, "begin", "run_at"),
        (JobCreate, "start_at", "run_at"),
        (JobCreate, "scheduled_at", "run_at"),
        (JobCreate, "node", "node_selector"),  # the prefix: no table entry needed
        (JobCreate, "labels", "node_selector"),
        (JobCreate, "selector", "node_selector"),
        (JobCreate, "constraints", "node_selector"),
        (JobCreate, "depends_on", "after"),
        (JobCreate, "dependencies", "after"),
        (JobCreate, "needs", "after"),
        (JobCreate, "memory", "memory_mb"),
        (JobCreate, "mem", "memory_mb"),
        (JobCreate, "cpu", "cpus"),
        (JobCreate, "ncpus", "cpus"),
        (JobCreate, "type", "job_type"),
        (JobCreate, "url", "deploy_url"),
        (QuotaChange, "memory", "memory_mb"),
        (ScheduleRequest, "interval", "every_secs"),
        (ScheduleRequest, "schedule", "cron"),
        (ScheduleRequest, "tz", "timezone"),
        (ScheduleRequest, "suspend", "paused"),
        (ScheduleRequest, "template", "job"),
    ],
)
def test_a_name_brought_from_elsewhere_is_hinted_as_ours(
    kind: type[msgspec.Struct], name: str, meant: str
) -> None:
    assert refusal(kind, name) == f"{name}: unknown field (did you mean {meant}?)"


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        (JobCreate, "timeout"),  # a job has no timeout of its own
        (JobCreate, "interval"),  # a schedule's, not a job's
        (ScheduleRequest, "cmd"),  # a job's, inside the schedule's `job`
    ],
)
def test_no_hint_names_a_field_the_body_has_not(kind: type[msgspec.Struct], name: str) -> None:
    assert refusal(kind, name) == f"{name}: unknown field"


def test_keys_fold_before_the_table_as_go_folds_them() -> None:
    with pytest.raises(DecodeError) as refused:
        decode_go_style(b'{"Cmd":"echo hi"}', JobCreate)
    assert str(refused.value) == "cmd: unknown field (did you mean command?)"


def _strict_fields() -> set[str]:
    """Every field of a body the API refuses unknown fields of."""
    found: set[str] = set()
    for module in pkgutil.iter_modules(scheduler.models.__path__):
        loaded = importlib.import_module(f"scheduler.models.{module.name}")
        for value in vars(loaded).values():
            strict = isinstance(value, type) and issubclass(value, msgspec.Struct)
            if strict and value.__struct_config__.forbid_unknown_fields:
                found |= {f.encode_name for f in msgspec.structs.fields(value)}
    return found


def test_every_name_in_the_table_means_a_field_of_a_body() -> None:
    """An entry whose field no body has would never be said: a field renamed, say."""
    assert set(BROUGHT.values()) <= _strict_fields()

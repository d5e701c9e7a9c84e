"""A refused body says which field and what it must be, from the models' own constraints
(models/rules.py, issue 38)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import msgspec.inspect
import pytest

from scheduler.models.job import JobCreate, JobUpdate
from scheduler.models.registry import NodeRegistration
from scheduler.models.rules import explain, rule
from scheduler.models.schedule import ScheduleRequest
from scheduler.models.wire import DecodeError, Int64, decode_go_style, decode_with

JOB_TABLE = [
    (b'{"priority":5000}', "priority: must be an integer between -1000 and 1000"),
    (b'{"priority":-1001}', "priority: must be an integer between -1000 and 1000"),
    (b'{"priority":"high"}', "priority: must be an integer between -1000 and 1000, got a string"),
    (b'{"delay_secs":-5}', "delay_secs: must be a number between 0 and 31622400"),
    (b'{"max_retries":101}', "max_retries: must be an integer between 0 and 100"),
    (b'{"retry_backoff_secs":-1}', "retry_backoff_secs: must be an integer between 0 and 86400"),
    (b'{"cpus":"two"}', "cpus: must be an integer, got a string"),
    (b'{"port":true}', "port: must be an integer, got a boolean"),
    (b'{"after":"job-1"}', "after: must be a list of at most 100 strings, got a string"),
    (b'{"after":[1]}', "after: must be a list of at most 100 strings, got an integer at after[0]"),
    (
        b'{"env_vars":{"A":1}}',
        "env_vars: must be an object of strings, got an integer at env_vars[...]",
    ),
    (b'{"priorty":5}', "priorty: unknown field (did you mean priority?)"),
    (b'{"Priorty":5}', "priorty: unknown field (did you mean priority?)"),  # keys fold, as Go's
    (b'{"colour":"red"}', "colour: unknown field"),
    (b'{"' + b"x" * 500 + b'":1}', "x" * 64 + ": unknown field"),  # the client's text, bounded
    (b"", "body: empty (send a JSON object)"),
    (b"not json", "body: not valid JSON (invalid character at byte 4)"),
    (b'{"command":"x"', "body: not valid JSON (it ends inside a value)"),
    (b"\xff", "body: not valid JSON (invalid character at byte 0)"),
    (b'"echo"', "body: must be a JSON object, got a string"),
    (b"[" * 3000 + b"]" * 3000, "body: JSON nested too deeply"),
]


@pytest.mark.parametrize(("body", "message"), JOB_TABLE, ids=lambda v: repr(v)[:40])
def test_a_job_request_refused_names_the_field_and_the_rule(body: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as refused:
        decode_go_style(body, JobCreate)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("kind", "body", "message"),
    [
        (JobUpdate, b'{"exit_code":1.5}', "exit_code: must be an integer, got a number"),
        (
            NodeRegistration,
            b'{"cpu_count":"4"}',
            "cpu_count: must be a 64-bit integer, got a string",
        ),
        (
            NodeRegistration,
            b'{"labels":{"a":1}}',
            "labels: must be an object of strings, got an integer at labels[...]",
        ),
    ],
)
def test_other_bodies_say_it_alike(kind: type[msgspec.Struct], body: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as refused:
        decode_go_style(body, kind)
    assert str(refused.value) == message


def test_an_agents_body_keeps_its_own_fields() -> None:
    """A report and a registration ignore unknown keys, as Go did: agents send their own."""
    assert decode_go_style(b'{"status":"done","v":1}', JobUpdate) == JobUpdate(status="done")
    assert decode_go_style(b'{"id":"n1","gpu":1}', NodeRegistration).id == "n1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"name":"a","every_sec":5}', "every_sec: unknown field (did you mean every_secs?)"),
        (b'{"every_secs":5}', "name: required"),
        (b'{"name":"a","paused":"no"}', "paused: must be true or false, got a string"),
        (b"[]", "body: must be a JSON object, got an array"),
        (b"{", "body: not valid JSON (it ends inside a value)"),
    ],
)
def test_a_strict_decoder_says_it_alike(body: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as refused:
        decode_with(msgspec.json.Decoder(ScheduleRequest), body)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("annotation", "said"),
    [
        (int, "an integer"),
        (Annotated[int, msgspec.Meta(ge=1)], "an integer at least 1"),
        (Annotated[int, msgspec.Meta(le=9)], "an integer at most 9"),
        (Annotated[int, msgspec.Meta(gt=0, lt=10)], "an integer greater than 0 and less than 10"),
        (Int64, "a 64-bit integer"),
        (Annotated[float, msgspec.Meta(ge=0.5, le=2)], "a number between 0.5 and 2"),
        (Annotated[str, msgspec.Meta(max_length=8)], "a string of at most 8 characters"),
        (bool, "true or false"),
        (int | None, "an integer"),
        (list[int], "a list of integers"),
        (dict[str, list[str]], "an object of lists of strings"),
        (dict[str, Any], "an object of JSON values"),
        (str | list[str], "a string or a list of strings"),
    ],
)
def test_a_rule_is_said_from_the_type(annotation: Any, said: str) -> None:
    holder = msgspec.defstruct("Holder", [("value", annotation)])
    info = msgspec.inspect.type_info(holder)
    assert isinstance(info, msgspec.inspect.StructType)
    assert rule(info.fields[0].type) == said


def test_a_message_it_does_not_know_is_kept() -> None:
    assert explain(msgspec.ValidationError("Something new"), JobCreate) == "Something new"
    nested = msgspec.ValidationError("Expected `int`, got `str` - at `$.outer.inner`")
    assert explain(nested, JobCreate) == "outer.inner: Expected `int`, got `str`"

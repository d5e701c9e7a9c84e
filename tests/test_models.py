"""Wire models and timestamps (scheduler/models/): Go-style decoding, our validation, the
output bound and RFC 3339 round trips."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from scheduler.models.fields import read_fields
from scheduler.models.job import (
    TRUNCATION_MARKER,
    Job,
    JobCreate,
    JobUpdate,
    bound_output,
    new_job,
    validate_create,
    validate_update,
)
from scheduler.models.record import creation_parts
from scheduler.models.wire import (
    DecodeError,
    InvalidInput,
    check_id,
    decode_go_style,
    parse_rfc3339,
    rfc3339,
)


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"null", JobCreate()),
        (b" null ", JobCreate()),
        (b"{}", JobCreate()),
        (b'{"command":"a"}', JobCreate(command="a")),
        (b'{"CoMmAnD":"a"}', JobCreate(command="a")),
        (b'{"command":"a","nope":null}', JobCreate(command="a")),  # null: absent
        (b'{"command":"a"} {"command":"b"}', JobCreate(command="a")),
        (b'{"command":"a"}]]]', JobCreate(command="a")),
        (b'{"command":null,"port":null}', JobCreate()),
        (b'{"env_vars":{"Key":"v"}}', JobCreate(env_vars={"Key": "v"})),
        (
            b'{"Env_Vars":{"lower":"v","UPPER":"w"}}',
            JobCreate(env_vars={"lower": "v", "UPPER": "w"}),
        ),
        (b'{"port":8080,"job_type":"service"}', JobCreate(port=8080, job_type="service")),
        (b'{"command":"\\u00e9\\n"}', JobCreate(command="é\n")),
    ],
)
def test_decode_go_style_accepts(body: bytes, expected: JobCreate) -> None:
    assert decode_go_style(body, JobCreate) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"  ",
        b"{",
        b"}",
        b"nul",
        b"[]",
        b"[{}]",
        b"1",
        b'"{}"',
        b"true",
        b'{"command":1}',
        b'{"port":"80"}',
        b'{"port":1.5}',
        b'{"port":1e2}',
        b'{"port":false}',
        b'{"env_vars":[]}',
        b'{"env_vars":{"A":1}}',
        b'{"env_vars":{"A":null}}',
        b"{'command':'a'}",
        b'{"command":"a",}',
        b'{"command":"a","nope":[1,{"x":null}]}',  # a job request's fields are all known
        b"[" * 3000 + b"]" * 3000,
        b'{"command":"a","x":' + b"[" * 20000 + b"]" * 20000 + b"}",  # deeper than Go allows
    ],
    ids=lambda body: repr(body[:40]),
)
def test_decode_go_style_rejects(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_go_style(body, JobCreate)


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            b'{"status":"running","exit_code":null,"stdout":"","stderr":""}',
            JobUpdate(status="running"),
        ),
        (b'{"status":"done","exit_code":0}', JobUpdate(status="done", exit_code=0)),
        (b'{"STATUS":"failed","Exit_Code":-1}', JobUpdate(status="failed", exit_code=-1)),
        (b'{"status":"done","stdout":"o","stderr":"e"}', JobUpdate("done", None, "o", "e")),
        (b'{"status":"done","agent":"x","pid":1}', JobUpdate(status="done")),
    ],
)
def test_decode_update(body: bytes, expected: JobUpdate) -> None:
    """Go's leniency, unknown keys ignored: an agent may send fields of its own."""
    assert decode_go_style(body, JobUpdate) == expected


@pytest.mark.parametrize(
    "body", [b'{"exit_code":1.5}', b'{"exit_code":"1"}', b'{"exit_code":true}', b'{"stdout":[]}']
)
def test_decode_update_rejects(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_go_style(body, JobUpdate)


@pytest.mark.parametrize(
    "request_, field",
    [
        (JobCreate(), "command or deploy_url is required"),
        (JobCreate(command="x", job_type="batch"), "job_type"),
        (JobCreate(command="x", port=-1), "port"),
        (JobCreate(command="x", port=65536), "port"),
        (JobCreate(command="x", env_vars={"9A": "x"}), "env_vars"),
        (JobCreate(command="x", env_vars={"A.B": "x"}), "env_vars"),
        (JobCreate(command="x", instance_id="i/1"), "instance_id"),
        (JobCreate(command="x", instance_id="i" * 129), "instance_id"),
        (JobCreate(deploy_url="ftp://x/a.zip"), "deploy_url"),
        (JobCreate(deploy_url="/local/a.zip"), "deploy_url"),
    ],
)
def test_validate_create_rejects(request_: msgspec.Struct, field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        validate_create(new_job(request_))


@pytest.mark.parametrize(
    "request_",
    [
        JobCreate(command="x"),
        JobCreate(command="x", job_type="run", port=0),
        JobCreate(command="x", job_type="service", port=65535),
        JobCreate(command="x", env_vars={"_": "", "A_1": "v"}),
        JobCreate(command="x", instance_id="i-1.a_B"),
        JobCreate(deploy_url="http://store/a.zip"),
        JobCreate(deploy_url="https://store/a.zip"),
    ],
)
def test_validate_create_accepts(request_: msgspec.Struct) -> None:
    validate_create(new_job(request_))


@pytest.mark.parametrize(
    "code, ok",
    [
        (0, True),
        (-1, True),
        (2**31 - 1, True),
        (-(2**31), True),
        (2**31, False),
        (-(2**31) - 1, False),
    ],
)
def test_validate_update_exit_code(code: int, ok: bool) -> None:
    if ok:
        validate_update(JobUpdate(status="done", exit_code=code))
    else:
        with pytest.raises(InvalidInput, match="exit_code"):
            validate_update(JobUpdate(status="done", exit_code=code))


@pytest.mark.parametrize(
    "value, ok",
    [
        ("job-1", True),
        ("a", True),
        ("A.b_c-9", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("a b", False),
        ("a/b", False),
        ("a\nb", False),
        ("a\n", False),
        ("é", False),
    ],
)
def test_check_id(value: str, ok: bool) -> None:
    if ok:
        check_id("id", value)
    else:
        with pytest.raises(InvalidInput, match="invalid id"):
            check_id("id", value)


def _cut(kept: str, dropped: int) -> str:
    return kept + TRUNCATION_MARKER.format(dropped=dropped)


@pytest.mark.parametrize(
    "text, limit, expected",
    [
        ("", 4, ""),
        ("abcd", 4, "abcd"),
        ("abcde", 4, _cut("abcd", 1)),
        ("éé", 4, "éé"),  # 4 bytes exactly
        ("ééé", 4, _cut("éé", 2)),
        ("aéé", 4, _cut("aé", 2)),  # the cut falls inside the second é
        ("€€", 4, _cut("€", 3)),
        ("😀😀", 5, _cut("😀", 4)),
        ("😀", 3, _cut("", 4)),
    ],
)
def test_bound_output(text: str, limit: int, expected: str) -> None:
    bounded = bound_output(text, limit)
    assert bounded == expected
    kept = bounded.split("\n[output truncated")[0]
    assert len(kept.encode()) <= limit and text.startswith(kept)


def test_job_encoding_follows_the_emptiness_rules() -> None:
    bare = Job(
        job_id="job-1",
        node_id="n1",
        command="",
        status="pending",
        retry_count=0,
        created_at="2026-01-01T00:00:00Z",
    )
    assert msgspec.json.decode(msgspec.json.encode(bare)) == {
        "job_id": "job-1",
        "node_id": "n1",
        "command": "",
        "status": "pending",
        "retry_count": 0,
        "created_at": "2026-01-01T00:00:00Z",
    }
    finished = msgspec.structs.replace(bare, status="done", exit_code=0)
    assert msgspec.json.decode(msgspec.json.encode(finished))["exit_code"] == 0


def test_a_request_becomes_the_create_scripts_json() -> None:
    new = new_job(JobCreate(command="c", port=80), "2026-01-01T00:00:00Z")
    assert (new.job_id, new.node_id, new.status, new.retry_count) == ("", "", "pending", 0)
    # The script writes job_id and node_id in front: Job's order, as Go's encoder.
    # A small spec stays in the head (models/record.py).
    parts = creation_parts(new)
    assert parts.head == (
        b'{"command":"c","port":80,"status":"pending","retry_count":0,'
        b'"created_at":"2026-01-01T00:00:00Z"}'
    )
    assert (parts.spec, parts.outputs) == (b"", ("", ""))
    with pytest.raises(ValueError):
        creation_parts(msgspec.structs.replace(new, job_id="job-1"))


def test_the_original_request_fields_are_submitted_and_optional() -> None:
    info = msgspec.inspect.type_info(JobCreate)
    assert isinstance(info, msgspec.inspect.StructType)
    fields = {f.name: f for f in info.fields}
    # CONTRACT 2.2, JobRequest.
    assert {"command", "instance_id", "deploy_url", "env_vars", "job_type", "port"} <= set(fields)
    assert not any(f.required for f in fields.values())
    # What new_job sets is the scheduler's, never the client's.
    assert {"job_id", "node_id", "status", "retry_count", "created_at"}.isdisjoint(fields)


class _NonZeroDefault(msgspec.Struct):
    x: int = 5


class _RequiredOptional(msgspec.Struct):
    x: int | None


class _NullableZero(msgspec.Struct):
    x: int | None = 0


class _Bool(msgspec.Struct):
    x: bool = False


class _List(msgspec.Struct):
    x: list[int] = []  # a list holds strings (job ids) only


@pytest.mark.parametrize(
    "cls",
    [_NonZeroDefault, _RequiredOptional, _NullableZero, _Bool, _List],
    ids=lambda c: c.__name__,
)
def test_a_field_the_encoders_cannot_agree_on_is_refused(cls: type[msgspec.Struct]) -> None:
    """msgspec omits a field at its default, the Lua encoder at its zero, the snapshot has
    a column type per kind: a field outside those rules fails at import, not in production."""
    with pytest.raises(TypeError, match=f"{cls.__name__}.x"):
        read_fields(cls)


@pytest.mark.parametrize(
    "epoch", [0.0, 1.5, 1767261600.0, 1767261600.123456, 1767261600.999999, 4102444800.25]
)
def test_rfc3339_round_trip(epoch: float) -> None:
    text = rfc3339(epoch)
    assert text.endswith("Z") and "T" in text
    assert parse_rfc3339(text) == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-01-01T10:00:00Z", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        ("2026-01-01T10:00:00.5Z", datetime(2026, 1, 1, 10, 0, 0, 500000, tzinfo=UTC)),
        ("2026-01-01T10:00:00.123456789Z", datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-01-01T12:00:00+02:00", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        ("2026-01-01T10:00:00.000000001-01:00", datetime(2026, 1, 1, 11, tzinfo=UTC)),
    ],
)
def test_parse_rfc3339_accepts_the_original_forms(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == pytest.approx(expected.timestamp(), abs=1e-6)


def test_rfc3339_is_utc_with_microseconds() -> None:
    assert rfc3339(1767261600.5) == "2026-01-01T10:00:00.500000Z"
    assert rfc3339(0) == "1970-01-01T00:00:00.000000Z"


# Timestamps.
def _reference(epoch: float) -> str:
    return datetime.fromtimestamp(round(epoch * 1e6) / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    "epoch",
    [0.0, 1.5, 59.9999995, 60.0, 1_764_000_000.123456, 1_764_000_000.9999996, -1.5, 4e9],
)
def test_rfc3339_matches_strftime_across_second_boundaries(epoch: float) -> None:
    assert rfc3339(epoch) == _reference(epoch)


def test_rfc3339_cached_second_does_not_leak_into_the_next() -> None:
    assert rfc3339(100.25).startswith("1970-01-01T00:01:40.")
    assert rfc3339(101.25) == "1970-01-01T00:01:41.250000Z"
    assert rfc3339(100.75) == "1970-01-01T00:01:40.750000Z"


@pytest.mark.parametrize(
    "text, epoch",
    [
        ("2026-01-01T10:00:00Z", 1_767_261_600.0),
        ("2026-01-01T10:00:00.5Z", 1_767_261_600.5),
        ("2026-01-01T10:00:00.123456789Z", 1_767_261_600.123456),
        ("2026-01-01T11:00:00+01:00", 1_767_261_600.0),
    ],
)
def test_parse_rfc3339_reads_every_form_the_original_wrote(text: str, epoch: float) -> None:
    assert parse_rfc3339(text) == pytest.approx(epoch, abs=1e-6)

"""models/record.py: a record in parts and back, byte for byte what one encoder of the whole
job writes, and the whole records of earlier versions read as they are."""

from __future__ import annotations

import json

import msgspec
import pytest

from scheduler.models.job import JOB_FIELDS, Job, record_encoder
from scheduler.models.record import (
    OUTPUT_FIELDS,
    PART_COUNT,
    SPEC_FIELDS,
    assemble,
    is_whole,
    record,
    records,
    split,
)

BASE = {
    "job_id": "job-7",
    "node_id": "n1",
    "status": "done",
    "retry_count": 1,
    "created_at": "2026-01-01T00:00:00.000000Z",
}
JOBS = {
    "bare": Job(command="true", **BASE),  # type: ignore[arg-type]
    "every part": Job(
        command="echo $A",
        deploy_url="https://example.com/a.tar",
        env_vars={"Z": "1", "A": "a/b", "M": "é"},
        stdout="out\n",
        stderr='err "quoted" \\ 😀',
        exit_code=0,
        **BASE,  # type: ignore[arg-type]
    ),
    "deploy only": Job(command="", deploy_url="http://x", **BASE),  # type: ignore[arg-type]
    "exit 0 kept, after and selector": Job(
        command="c",
        exit_code=0,
        after=["job-1", "job-2"],
        node_selector={"zone": ["a", "b"], "node.id": "n1"},
        **BASE,  # type: ignore[arg-type]
    ),
    "control characters": Job(command="a\x01b\tc\nd", stdout="\x7f\x00", **BASE),  # type: ignore[arg-type]
}


def stored_parts(raw: bytes) -> list[bytes | None]:
    """The values Redis would hold for `raw` (absent parts: None), as MGET answers them."""
    parts = split(raw)
    outputs = [text.encode() or None for text in parts.outputs]
    return [parts.head, parts.spec or None, *outputs]


@pytest.mark.parametrize("name", list(JOBS))
def test_a_record_in_parts_comes_back_byte_for_byte(name: str) -> None:
    raw = record_encoder.encode(JOBS[name])
    assert record(stored_parts(raw)) == raw


@pytest.mark.parametrize("name", list(JOBS))
def test_the_head_holds_no_part_and_the_spec_no_other_field(name: str) -> None:
    parts = split(record_encoder.encode(JOBS[name]))
    head = json.loads(parts.head)
    assert not set(head) & {*SPEC_FIELDS, *OUTPUT_FIELDS}
    assert set(json.loads(parts.spec or b"{}")) <= set(SPEC_FIELDS)
    job = JOBS[name]
    assert parts.outputs == tuple(getattr(job, f) for f in OUTPUT_FIELDS)


def test_the_parts_are_the_fields_marked_in_job() -> None:
    assert SPEC_FIELDS == ("command", "deploy_url", "env_vars")
    assert OUTPUT_FIELDS == ("stdout", "stderr")
    assert PART_COUNT == 4
    assert [f.name for f in JOB_FIELDS if f.part] == [*SPEC_FIELDS, *OUTPUT_FIELDS]


def test_a_whole_record_of_an_earlier_version_reads_as_it_is() -> None:
    raw = record_encoder.encode(JOBS["every part"])
    assert is_whole(raw)
    assert not is_whole(split(raw).head)
    assert record([raw, None, None, None]) == raw


def test_a_part_overrides_the_field_a_whole_head_still_holds() -> None:
    """A report on a whole record before the upgrade split it writes its output apart."""
    raw = record_encoder.encode(JOBS["every part"])
    got = json.loads(assemble(raw, None, [b"new out", None]))
    assert got["stdout"] == "new out"
    assert got["stderr"] == JOBS["every part"].stderr


def test_fields_beyond_jobs_follow_sorted() -> None:
    head = split(record_encoder.encode(JOBS["bare"])).head
    head = head[:-1] + b',"zz":1,"aa":{"x":[1]}}'
    names = list(json.loads(assemble(head, b'{"command":"c"}', [None, None])))
    assert names[-2:] == ["aa", "zz"]
    assert names.index("command") == names.index("node_id") + 1


def test_records_of_a_reply_leave_out_the_jobs_without_a_head() -> None:
    one = record_encoder.encode(JOBS["bare"])
    two = record_encoder.encode(JOBS["every part"])
    flat = [*stored_parts(one), None, None, None, None, *stored_parts(two)]
    assert records(flat) == [one, two]
    assert record([None, b'{"command":"x"}', None, None]) is None


@pytest.mark.parametrize("head", [b"{not json", b"[1]"])
def test_a_head_that_is_not_a_record_is_not_whole_and_does_not_assemble(head: bytes) -> None:
    assert not is_whole(head)
    with pytest.raises(msgspec.DecodeError):
        assemble(head, None, [None, None])


def test_a_split_refuses_what_is_not_a_record() -> None:
    with pytest.raises(ValueError, match="not a job record"):
        split(b"{")

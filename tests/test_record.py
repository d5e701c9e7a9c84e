"""models/record.py: a record whole while small, its large parts apart, and back, byte for
byte what one encoder of the whole job writes; the whole records of earlier versions read as
they are."""

from __future__ import annotations

import json

import msgspec
import pytest

from scheduler.models.job import JOB_FIELDS, Job, record_encoder
from scheduler.models.record import (
    APART,
    INLINE_BYTES,
    OUTPUT_FIELDS,
    PART_COUNT,
    SPEC_FIELDS,
    assemble,
    creation_parts,
    has_apart,
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
BIG = "é" * INLINE_BYTES  # twice INLINE_BYTES of UTF-8
EDGE = "x" * INLINE_BYTES  # the largest output a head keeps
JOBS = {
    "bare": Job(command="true", **BASE),  # type: ignore[arg-type]
    "every part, small": Job(
        command="echo $A",
        deploy_url="https://example.com/a.tar",
        env_vars={"Z": "1", "A": "a/b", "M": "é"},
        stdout="out\n",
        stderr='err "quoted" \\ 😀',
        exit_code=0,
        **BASE,  # type: ignore[arg-type]
    ),
    "every part, large": Job(
        command="c" * 100,
        env_vars={f"V{i}": "v" * 40 for i in range(200)},
        stdout=BIG,
        stderr=BIG + "\n",
        exit_code=1,
        after=["job-1"],
        **BASE,  # type: ignore[arg-type]
    ),
    "only stderr large, stdout at the edge": Job(
        command="c",
        stdout=EDGE,
        stderr=BIG,
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
APART_OF = {
    "every part, large": ["spec", "stdout", "stderr"],
    "only stderr large, stdout at the edge": ["stderr"],
}


def apart_of(head: bytes) -> list[str]:
    """The parts a head says are kept apart."""
    named: dict[str, str] = json.loads(head).get(APART, {})
    return list(named)


def stored_parts(raw: bytes) -> list[bytes | None]:
    """The values Redis holds for `raw` (absent keys: None), as MGET answers them."""
    parts = split(raw)
    outputs = [text.encode() or None for text in parts.outputs]
    return [parts.head, parts.spec or None, *outputs]


@pytest.mark.parametrize("name", list(JOBS))
def test_a_record_comes_back_byte_for_byte(name: str) -> None:
    raw = record_encoder.encode(JOBS[name])
    assert record(stored_parts(raw)) == raw


@pytest.mark.parametrize("name", list(JOBS))
def test_only_large_parts_leave_the_head_which_names_them(name: str) -> None:
    raw = record_encoder.encode(JOBS[name])
    parts = split(raw)
    apart = APART_OF.get(name, [])
    assert apart_of(parts.head) == apart
    assert has_apart(parts.head) == bool(apart)
    if not apart:  # the head is the wire's record itself
        assert parts == (split(raw).__class__)(raw, b"", ("", ""))
        return
    head = json.loads(parts.head)
    assert not set(head) & {*(SPEC_FIELDS if "spec" in apart else ()), *apart}
    assert bool(parts.spec) == ("spec" in apart)
    for name_, text in zip(OUTPUT_FIELDS, parts.outputs, strict=True):
        assert text == (getattr(JOBS[name], name_) if name_ in apart else "")
    assert len(parts.head) < 2 * INLINE_BYTES


def test_the_parts_are_the_fields_marked_in_job() -> None:
    assert SPEC_FIELDS == ("command", "deploy_url", "env_vars")
    assert OUTPUT_FIELDS == ("stdout", "stderr")
    assert PART_COUNT == 4
    assert [f.name for f in JOB_FIELDS if f.part] == [*SPEC_FIELDS, *OUTPUT_FIELDS]
    assert APART not in {f.name for f in JOB_FIELDS}


def test_a_whole_record_of_an_earlier_version_reads_as_it_is() -> None:
    raw = record_encoder.encode(JOBS["every part, large"])
    assert is_whole(raw)
    assert not is_whole(split(raw).head)
    assert not is_whole(record_encoder.encode(JOBS["every part, small"]))
    assert record([raw, None, None, None]) == raw


def test_fields_beyond_jobs_follow_sorted() -> None:
    head = split(record_encoder.encode(JOBS["every part, large"])).head
    head = head[:-1] + b',"zz":1,"aa":{"x":[1]}}'
    names = list(json.loads(assemble(head, b'{"command":"c"}', [None, None])))
    assert names[-2:] == ["aa", "zz"]
    assert names.index("command") == names.index("node_id") + 1
    assert APART not in names


def test_records_of_a_reply_leave_out_the_jobs_without_a_head() -> None:
    one = record_encoder.encode(JOBS["bare"])
    two = record_encoder.encode(JOBS["every part, large"])
    flat = [*stored_parts(one), None, None, None, None, *stored_parts(two)]
    assert records(flat) == [one, two]
    assert record([None, b'{"command":"x"}', None, None]) is None


def test_a_text_that_looks_like_the_mark_is_read_right() -> None:
    """An env var named _parts puts the mark's text in a head that names no part."""
    raw = record_encoder.encode(
        Job(command="c", env_vars={"_parts": "x"}, **BASE)  # type: ignore[arg-type]
    )
    assert has_apart(raw) and apart_of(raw) == []
    assert record([raw, None, None, None]) == raw


@pytest.mark.parametrize("head", [b"{not json", b"[1]"])
def test_a_head_that_is_not_a_record_is_not_whole(head: bytes) -> None:
    assert not is_whole(head)


def test_a_split_refuses_what_is_not_a_record() -> None:
    with pytest.raises(ValueError, match="not a job record"):
        split(b"{")


def test_a_new_jobs_spec_leaves_its_head_only_when_large() -> None:
    small = creation_parts(
        Job(command="c", job_id="", node_id="", status="pending", retry_count=0, created_at="t")
    )
    assert small.head.startswith(b'{"command":"c"') and small.spec == b""
    large = Job(
        command="c" * (INLINE_BYTES + 1),
        job_id="",
        node_id="",
        status="pending",
        retry_count=0,
        created_at="t",
    )
    parts = creation_parts(large)
    assert json.loads(parts.spec) == {"command": large.command}
    assert json.loads(parts.head)[APART] == {"spec": ""}
    with pytest.raises(ValueError):
        creation_parts(msgspec.structs.replace(large, job_id="job-1"))

"""The client's reader of Server-Sent Events (scheduler/client/sse.py), without a socket: lines
parsed into events as the spec says, and the `follow` plan driven by hand (a fake driver
answers its Open, Read, Now and Sleep steps), which resumes after the last whole event
(Last-Event-ID), so a follower shows nothing twice and misses nothing."""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.client import sse
from scheduler.client.errors import ApiError, NotFound, Unauthorized, Unavailable, Unreachable
from scheduler.client.sse import Event, Lines, Parser, follow, pause
from scheduler.client.steps import Item, Lost, NotSent, Now, Open, Read, Reply, Request, Sleep


def parsed(chunks: list[bytes]) -> tuple[list[Event], Parser]:
    parser, lines = Parser(), Lines()
    read = [line for chunk in chunks for line in lines.feed(chunk)] + lines.end()
    return [e for line in read if (e := parser.line(line)) is not None], parser


def test_events_are_parsed_as_the_spec_says() -> None:
    text = (
        ": keepalive\n\n"
        "retry: 1500\n\n"
        'id: 7-0\nevent: output\ndata: {"a": 1}\n\n'
        "data: one\ndata:two\ndata\n\n"  # lines joined; no space after the colon; no colon
        "event: end\nid: 8-0\nnonsense: x\ndata: {}\n\n"
        "id: 9-0\nevent: ignored\n\n"  # no data: no event, its id counts
        "data: cut off"  # no blank line: not an event
    )
    got, parser = parsed([text.encode()])
    assert got == [
        Event("output", '{"a": 1}', "7-0"),
        Event("message", "one\ntwo\n", "7-0"),
        Event("end", "{}", "8-0"),
    ]
    assert parser.retry_secs == 1.5 and parser.last_id == "9-0"


def test_lines_end_in_lf_crlf_or_cr_even_across_chunks() -> None:
    chunks = [b"data: a\r", b"\ndata: b\r", b"data: \xc3", b"\xa9\r\n\r", b"\n", b"\r"]
    lines = Lines()
    read = [line for chunk in chunks for line in lines.feed(chunk)] + lines.end()
    assert read == ["data: a", "data: b", "data: é", "", ""]
    assert parsed(chunks)[0] == [Event("message", "a\nb\né", "")]


def test_a_byte_order_mark_is_dropped_at_the_start_only() -> None:
    lines = Lines()
    assert lines.feed(b"\xef\xbb\xbfdata: x\n") == ["data: x"]
    assert lines.feed(b"\xef\xbb\xbfdata: y\n") == ["\ufeffdata: y"]


def test_a_bad_retry_and_an_id_with_nul_are_ignored() -> None:
    parser = Parser()
    for line in ["retry: 1s", "retry: ", "id: a\0b", "data: x", ""]:
        parser.line(line)
    assert parser.retry_secs == sse.RETRY_SECS and parser.last_id == ""


def test_an_event_cut_off_by_a_lost_connection_is_not_one() -> None:
    parser = Parser()
    for line in ["id: 1-0", "data: whole", "", "id: 2-0", "data: cut"]:
        parser.line(line)
    parser.lost()
    assert parser.line("") is None and parser.last_id == "1-0"


def test_a_reconnection_waits_the_servers_delay_then_backs_off() -> None:
    assert pause(2.0, 0) == 2.0
    assert [pause(1.0, n) for n in range(1, 6)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert pause(0.0, 0) == 0.0  # the server's `retry: 0`, once
    assert pause(0.0, 1) == sse.MIN_BACKOFF_SECS * 2  # never a tight loop after a failure


# A fake driver: each connection the plan opens gets the next of a script's answers.


@dataclass
class Connection:
    """What an Open gets: a head (or a failure thrown in), then these chunks, then the
    stream's end (`whole`) or a lost connection."""

    head: Reply | Exception
    chunks: tuple[str, ...] = ()
    whole: bool = True


def stream(*chunks: str, whole: bool = False) -> Connection:
    """An event stream sent in these chunks, then the connection lost (or, `whole`, ended)."""
    return Connection(Reply(200, {"content-type": "text/event-stream"}, b""), chunks, whole)


def refusal(status: int, text: str) -> Connection:
    return Connection(Reply(status, {"content-type": "text/plain"}, text.encode()))


def unreachable() -> Connection:
    return Connection(NotSent("at http://scheduler.test: connection refused"))


@dataclass
class Driven:
    """What the plan did: its items, the requests it opened, the pauses it slept, and the
    error it ended with."""

    items: list[Event] = field(default_factory=list)
    opened: list[Request] = field(default_factory=list)
    pauses: list[float] = field(default_factory=list)
    failure: Exception | None = None


def drive(plan: Generator[Any, Any, Any], *script: Connection) -> Driven:
    """Run `plan` against the script until it ends, raises, or opens a connection past the
    script's (the caller stops reading there); its clock moves on by its Sleeps only."""
    driven, connections = Driven(), list(script)
    now, chunks, whole = 0.0, list[bytes](), True
    answer: Any = None
    failure: Exception | None = None
    while True:
        try:
            step = plan.throw(failure) if failure else plan.send(answer)
        except StopIteration:
            return driven
        except Exception as exc:  # the call's error
            driven.failure = exc
            return driven
        answer, failure = None, None
        if isinstance(step, Item):
            driven.items.append(step.value)
        elif isinstance(step, Open):
            if not connections:
                plan.close()
                return driven
            assert step.read_secs == sse.READ_TIMEOUT_SECS
            driven.opened.append(step.request)
            connection = connections.pop(0)
            if isinstance(connection.head, Exception):
                failure = connection.head
            else:
                answer = connection.head
                chunks = [chunk.encode() for chunk in connection.chunks]
                whole = connection.whole
        elif isinstance(step, Read):
            if chunks:
                answer = chunks.pop(0)
            elif whole:
                answer = b""
            else:
                failure = Lost("at http://scheduler.test: connection reset by peer")
        elif isinstance(step, Sleep):
            driven.pauses.append(step.secs)
            now += step.secs
        elif isinstance(step, Now):
            answer = now
        else:
            raise AssertionError(f"a follow takes no {step}")


def output(position: str, text: str) -> str:
    data = json.dumps({"stream": "stdout", "attempt": 1, "text": text})
    return f"id: {position}\nevent: output\ndata: {data}\n\n"


REQUEST = Request("GET", "/jobs/job-1/logs", params={"follow": "1"})
END = 'event: end\ndata: {"status": "done"}\n\n'


def last_ids(driven: Driven) -> list[str | None]:
    return [request.headers.get("Last-Event-ID") for request in driven.opened]


def test_a_follow_resumes_after_the_last_whole_event_and_reads_none_twice() -> None:
    second = output("1-1", "two\n")
    driven = drive(
        follow(REQUEST),
        # The connection drops in the middle of the second event.
        stream("retry: 0\n\n", output("1-0", "one\n"), second[:25]),
        refusal(503, "restarting\n"),  # the scheduler is not back yet: tried again
        stream(second, output("2-0", "three\n"), ": keepalive\n\n", whole=True),
        # A server that stops ends the stream: not a failure, the follow comes back.
        stream(END, whole=True),
    )
    assert driven.failure is None
    assert [(event.name, event.id) for event in driven.items] == [
        ("output", "1-0"),
        ("output", "1-1"),
        ("output", "2-0"),
        ("end", "2-0"),  # an event without an id of its own: the last one's
    ]
    assert last_ids(driven) == [None, "1-0", "1-0", "2-0"]
    assert all(r.headers["Accept"] == "text/event-stream" for r in driven.opened)
    assert all(r.params == {"follow": "1"} for r in driven.opened)
    # The server's delay (retry: 0), then backed off after the failed try, until heard from.
    assert driven.pauses == [0.0, sse.MIN_BACKOFF_SECS * 2, 0.0, 0.0]


def test_a_follow_gives_up_after_a_minute_without_the_scheduler() -> None:
    driven = drive(
        follow(REQUEST),
        stream("retry: 1000\n\n", output("1-0", "one\n")),
        *[unreachable() for _ in range(50)],
    )
    assert [event.id for event in driven.items] == ["1-0"]
    pauses = driven.pauses
    assert pauses[:5] == [1.0, 2.0, 4.0, 8.0, 10.0] and max(pauses) == sse.MAX_PAUSE_SECS
    assert sum(pauses[:-1]) < sse.GIVE_UP_SECS <= sum(pauses)
    assert isinstance(driven.failure, Unreachable)
    assert str(driven.failure) == (
        "lost the scheduler for 60 s: at http://scheduler.test: connection refused"
    )
    assert set(last_ids(driven)[1:]) == {"1-0"}


@pytest.mark.parametrize(
    ("first", "error", "message"),
    [
        (unreachable(), Unreachable, "cannot reach the scheduler at http://scheduler.test"),
        (refusal(503, "no shard\n"), Unavailable, "503: no shard"),
        (refusal(404, "job not found\n"), NotFound, "404: job not found"),
        (
            Connection(Reply(200, {"content-type": "text/plain"}, b"")),
            ApiError,
            "200: the scheduler answered text/plain, not an event stream",
        ),
    ],
)
def test_the_first_connection_is_not_retried(
    first: Connection, error: type[Exception], message: str
) -> None:
    driven = drive(follow(REQUEST), first, stream(END, whole=True))
    assert type(driven.failure) is error and str(driven.failure).startswith(message)
    assert len(driven.opened) == 1 and driven.items == []


def test_a_refusal_on_a_reconnection_ends_the_follow() -> None:
    driven = drive(
        follow(REQUEST),
        stream("retry: 0\n\n", output("1-0", "one\n"), whole=True),
        refusal(401, "unauthorized\n"),
    )
    assert isinstance(driven.failure, Unauthorized) and driven.failure.status == 401
    assert [event.id for event in driven.items] == ["1-0"]


def test_a_follow_that_ends_at_eof_ends_with_the_stream() -> None:
    driven = drive(follow(REQUEST, ends_at_eof=True), stream("retry: 0\n\n", whole=True))
    assert driven.failure is None and driven.items == [] and len(driven.opened) == 1

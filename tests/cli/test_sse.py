"""The CLI's SSE reader (scheduler/cli/sse.py) against scripted answers (httpx.MockTransport):
events parsed as the spec says, and a follower that loses its connection reconnects after
the last whole event (Last-Event-ID), so `logs -f` shows nothing twice and misses nothing."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from scheduler.cli import sse
from scheduler.cli.client import Client, ClientError
from scheduler.cli.main import build_parser
from scheduler.cli.sse import Event, Follower, Parser, lines
from scheduler.cli.watch import logs


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
    parser = Parser()
    got = [e for line in lines([text.encode()]) if (e := parser.line(line)) is not None]
    assert got == [
        Event("output", '{"a": 1}', "7-0"),
        Event("message", "one\ntwo\n", "7-0"),
        Event("end", "{}", "8-0"),
    ]
    assert parser.retry_secs == 1.5 and parser.last_id == "9-0"


def test_lines_end_in_lf_crlf_or_cr_even_across_chunks() -> None:
    chunks = [b"data: a\r", b"\ndata: b\r", b"data: \xc3", b"\xa9\r\n\r", b"\n", b"\r"]
    assert list(lines(chunks)) == ["data: a", "data: b", "data: é", "", ""]
    parser = Parser()
    assert [parser.line(line) for line in lines(chunks)][-2] == Event("message", "a\nb\né", "")


def test_a_bad_retry_and_an_id_with_nul_are_ignored() -> None:
    parser = Parser()
    for line in ["retry: 1s", "retry: ", "id: a\0b", "data: x", ""]:
        parser.line(line)
    assert parser.retry_secs == sse.RETRY_SECS and parser.last_id == ""


class Cut(httpx.SyncByteStream):
    """A body sent in these chunks, then the connection lost (or, `whole`, ended)."""

    def __init__(self, *chunks: str, whole: bool = False) -> None:
        self.chunks, self.whole = [c.encode() for c in chunks], whole

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if not self.whole:
            raise httpx.ReadError("connection reset by peer")


def stream(*chunks: str, whole: bool = False) -> httpx.Response:
    headers = {"content-type": "text/event-stream"}
    return httpx.Response(200, headers=headers, stream=Cut(*chunks, whole=whole))


def output(position: str, text: str, stream: str = "stdout", attempt: int = 1) -> str:
    data = json.dumps({"stream": stream, "attempt": attempt, "text": text})
    return f"id: {position}\nevent: output\ndata: {data}\n\n"


Answer = Callable[[httpx.Request], httpx.Response]


def scripted(*answers: Answer) -> tuple[Client, list[httpx.Request]]:
    """A client whose requests get these answers, one each, in order; and its requests."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[len(sent) - 1](request)

    return Client("http://scheduler.test", transport=httpx.MockTransport(handle)), sent


def run_logs(client: Client, *argv: str) -> tuple[int, str, str]:
    args = build_parser("logs").parse_args(["logs", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = logs(args, client, out, err)
    return code, out.getvalue(), err.getvalue()


def test_a_follower_resumes_after_the_last_whole_event_and_shows_none_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sse, "MIN_BACKOFF_SECS", 0.0)  # the script's retry: 0 is the wait
    second = output("1-1", "two\n")
    client, sent = scripted(
        # The connection drops in the middle of the second event.
        lambda r: stream("retry: 0\n\n", output("1-0", "one\n"), second[:25]),
        lambda r: httpx.Response(503, text="restarting\n"),  # the scheduler is not back yet
        lambda r: stream(second, output("2-0", "oops\n", "stderr"), ": keepalive\n\n"),
        # A server that stops ends the stream: the follower comes back.
        lambda r: stream('event: end\ndata: {"status": "done", "exit_code": 3}\n\n', whole=True),
    )
    code, out, err = run_logs(client, "-f", "job-1")
    assert (code, out, err) == (3, "one\ntwo\n", "oops\n")
    assert [r.url.path for r in sent] == ["/jobs/job-1/logs"] * 4
    assert all(r.url.params["follow"] == "1" for r in sent)
    assert [r.headers.get("last-event-id") for r in sent] == [None, "1-0", "1-0", "2-0"]
    assert sent[0].headers["accept"] == "text/event-stream"


def test_a_new_attempt_and_dropped_output_are_said_on_stderr() -> None:
    client, _ = scripted(
        lambda r: stream(
            output("1-0", "first\n"),
            'event: dropped\ndata: {"bytes": 70000}\n\n',
            output("3-0", "second\n", attempt=2),
            'event: end\ndata: {"status": "failed"}\n\n',
            whole=True,
        )
    )
    code, out, err = run_logs(client, "-f", "job-4")
    assert (code, out) == (1, "first\nsecond\n")
    assert err == (
        "[... 70000 bytes of earlier output dropped (LOG_MAX_BYTES) ...]\n"
        "--- attempt 2 ---\n"
        "job-4 failed\n"
    )


@pytest.mark.parametrize(
    ("end", "code"),
    [
        ({"status": "done"}, 0),
        ({"status": "done", "exit_code": 0}, 0),
        ({"status": "failed", "exit_code": 2}, 2),
        ({"status": "failed", "exit_code": 0}, 1),  # a failure never exits 0
        ({"status": "failed", "exit_code": -1}, 1),  # the Rust agent's "no exit code"
        ({"status": "failed", "exit_code": 137}, 137),
    ],
)
def test_logs_f_exits_with_the_jobs_code(end: dict[str, Any], code: int) -> None:
    client, _ = scripted(lambda r: stream(f"event: end\ndata: {json.dumps(end)}\n\n", whole=True))
    assert run_logs(client, "-f", "job-1")[0] == code


def test_a_follower_gives_up_after_a_minute_without_the_scheduler() -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    client, sent = scripted(
        lambda r: stream("retry: 1000\n\n", output("1-0", "one\n")), *[unreachable] * 50
    )
    now, pauses = [0.0], []

    def sleep(secs: float) -> None:
        pauses.append(secs)
        now[0] += secs

    follower = Follower(client, "/events", {}, sleep=sleep, clock=lambda: now[0])
    seen: list[Event] = []
    with pytest.raises(ClientError) as raised:
        seen.extend(follower.events())
    assert [e.id for e in seen] == ["1-0"]
    assert pauses[:5] == [1.0, 2.0, 4.0, 8.0, 10.0] and max(pauses) == sse.MAX_PAUSE_SECS
    assert sum(pauses[:-1]) < sse.GIVE_UP_SECS <= sum(pauses)
    assert str(raised.value) == (
        "error: lost the scheduler at http://scheduler.test for 60 s: connection refused"
    )
    assert all(r.headers["last-event-id"] == "1-0" for r in sent[1:])


def test_the_first_connection_is_not_retried() -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    client, sent = scripted(unreachable)
    with pytest.raises(ClientError, match=r"^error: cannot reach the scheduler at http"):
        list(Follower(client, "/events", {}).events())
    client, sent = scripted(lambda r: httpx.Response(503, text="no shard\n"))
    with pytest.raises(ClientError, match=r"^error: scheduler returned 503: no shard$"):
        list(Follower(client, "/events", {}).events())
    assert len(sent) == 1


def test_a_refusal_on_a_reconnection_ends_the_command() -> None:
    client, _ = scripted(
        lambda r: stream("retry: 0\n\n", output("1-0", "one\n"), whole=True),
        lambda r: httpx.Response(401, text="unauthorized\n"),
    )
    with pytest.raises(ClientError, match=r"^error: scheduler returned 401: unauthorized$"):
        list(Follower(client, "/jobs/job-1/logs", {}).events())
    assert client.unauthorized


def test_an_answer_that_is_not_an_event_stream_is_an_error() -> None:
    client, _ = scripted(lambda r: httpx.Response(200, text="hello\n"))
    with pytest.raises(ClientError, match="not an event stream"):
        list(Follower(client, "/events", {}).events())


def test_events_no_follow_ends_with_the_stream() -> None:
    client, sent = scripted(lambda r: stream("retry: 0\n\n", whole=True))
    assert list(Follower(client, "/events", {}, ends_at_eof=True).events()) == []
    assert len(sent) == 1

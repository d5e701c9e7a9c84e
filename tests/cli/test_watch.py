"""`scheduler logs` and `scheduler events` against a real server (the `serve` fixture: uvicorn
on a socket): output printed as it comes, on its own stream, the job's exit code, events a
line each or as JSON, and the server's refusals as the other commands print them; then
against scripted answers: a lost connection resumed, nothing shown twice."""

from __future__ import annotations

import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from scheduler.cli.client import run
from scheduler.cli.main import build_parser, main
from scheduler.cli.watch import _until, _wait, events, logs
from scheduler.client import Client, sse
from tests.cli.conftest import Cli
from tests.conftest import Serve
from tests.redis_server import free_port

DEADLINE = 60.0  # bounds a failure only: every wait ends as soon as its condition holds


@pytest.fixture
def served(serve: Serve) -> Iterator[tuple[str, httpx.Client]]:
    """A real server with one node, n1, and a client of its API."""
    url = serve(max_job_retries=1, follow_max_secs=60)
    with httpx.Client(base_url=url, timeout=DEADLINE) as http:
        body = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
        assert http.post("/nodes/register", json=body).status_code == 201
        yield url, http


def running(http: httpx.Client, command: str = "make") -> str:
    """A job submitted and claimed on n1, as its agent does; its id."""
    job = http.post("/jobs", json={"command": command}).json()
    report(http, job["job_id"], "running")
    return str(job["job_id"])


def report(http: httpx.Client, job_id: str, status: str, **fields: Any) -> None:
    response = http.patch(f"/jobs/{job_id}", json={"status": status, "node_id": "n1", **fields})
    assert response.status_code == 200, response.text


def send(http: httpx.Client, job_id: str, data: str, offset: int, stream: str = "stdout") -> None:
    """A chunk of the job's output, as its agent sends it."""
    body = {"node_id": "n1", "stream": stream, "offset": offset, "data": data}
    assert http.post(f"/jobs/{job_id}/output", json=body).status_code == 200


class Watched(io.StringIO):
    """A stream a test waits on until some text has been written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            written = super().write(text)
            self.changed.notify_all()
            return written

    def wait_for(self, text: str) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: text in self.getvalue(), DEADLINE), self.getvalue()


class Running:
    """`scheduler ARGV...` in a thread, its stdout and stderr watched."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, url: str, *argv: str) -> None:
        self.out, self.err, self.code = Watched(), Watched(), -1
        monkeypatch.setenv("SCHEDULER_URL", url)
        monkeypatch.setattr(sys, "stdout", self.out)
        monkeypatch.setattr(sys, "stderr", self.err)
        self.thread = threading.Thread(target=self._run, args=(list(argv),), daemon=True)
        self.thread.start()

    def _run(self, argv: list[str]) -> None:
        self.code = main(argv)

    def exit_code(self) -> int:
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), (self.out.getvalue(), self.err.getvalue())
        return self.code


def test_logs_prints_the_output_so_far(served: tuple[str, httpx.Client], cli: Cli) -> None:
    url, http = served
    job_id = running(http)
    send(http, job_id, "one\n", 0)
    send(http, job_id, "oops\n", 0, "stderr")
    send(http, job_id, "two, no newline", 4)
    assert cli(url, "logs", job_id) == (0, "one\noops\ntwo, no newline", "")
    assert cli(url, "logs", job_id, "--stream", "stderr") == (0, "oops\n", "")
    report(http, job_id, "failed", exit_code=1)  # retried: a second attempt
    report(http, job_id, "running")
    send(http, job_id, "again\n", 0)
    assert cli(url, "logs", job_id) == (0, "again\n", "")
    assert cli(url, "logs", job_id, "--attempt", "1", "--stream", "stdout")[1] == (
        "one\ntwo, no newline"
    )


def test_logs_says_when_earlier_output_was_dropped(serve: Serve, cli: Cli) -> None:
    url = serve(log_max_bytes=65536)
    with httpx.Client(base_url=url, timeout=DEADLINE) as http:
        body = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
        assert http.post("/nodes/register", json=body).status_code == 201
        job_id = running(http)
        for i in range(3):
            send(http, job_id, str(i) * 30000, 30000 * i)
    code, out, err = cli(url, "logs", job_id)
    assert (code, out) == (0, "1" * 30000 + "2" * 30000)
    assert err == "[... 30000 bytes of earlier output dropped (LOG_MAX_BYTES) ...]\n"


def test_logs_f_prints_output_as_it_comes_and_exits_with_the_jobs_code(
    served: tuple[str, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, http = served
    job_id = running(http)
    send(http, job_id, "before\n", 0)
    cli = Running(monkeypatch, url, "logs", "-f", job_id)
    cli.out.wait_for("before\n")  # connected, and following
    send(http, job_id, "after\n", 7)
    cli.out.wait_for("before\nafter\n")
    send(http, job_id, "warning\n", 0, "stderr")
    cli.err.wait_for("warning\n")
    report(http, job_id, "done", exit_code=3)
    assert cli.exit_code() == 3
    assert (cli.out.getvalue(), cli.err.getvalue()) == ("before\nafter\n", "warning\n")


def test_logs_f_follows_the_next_attempt_and_one_stream(
    served: tuple[str, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, http = served
    job_id = running(http)
    send(http, job_id, "first\n", 0)
    send(http, job_id, "first err\n", 0, "stderr")
    cli = Running(monkeypatch, url, "logs", "-f", "--stream", "stderr", job_id)
    cli.err.wait_for("first err\n")
    report(http, job_id, "failed", exit_code=1)  # max_job_retries=1: it runs again
    report(http, job_id, "running")
    send(http, job_id, "second\n", 0)
    send(http, job_id, "second err\n", 0, "stderr")
    cli.err.wait_for("second err\n")
    report(http, job_id, "failed", exit_code=2)
    assert cli.exit_code() == 2
    assert cli.out.getvalue() == ""
    assert cli.err.getvalue() == "first err\n--- attempt 2 ---\nsecond err\n"


SHOWS = "its output shows here when it runs\n"


def test_logs_f_of_a_job_not_started_says_what_it_waits_for_on_stderr(
    served: tuple[str, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line at the start, from the job's record: pending on its node, unplaced (why, and
    what would place it), delayed (until when), waiting (for which jobs); stdout untouched."""
    url, http = served

    def submitted(**body: Any) -> str:
        return str(http.post("/jobs", json={"command": "make", **body}).json()["job_id"])

    queued, unplaced = submitted(), submitted(cpus=99)
    delayed, waiting = submitted(delay_secs=600), submitted(after=[queued])
    said = {
        queued: f"{queued} is pending on n1 (not started yet): {SHOWS}",
        unplaced: f"{unplaced} is pending on no node (no_fit): no live node offers 99 cpus; it "
        f"waits until one does (`scheduler nodes` shows what each offers); {SHOWS}",
        waiting: f"{waiting} waits for {queued} to be done: {SHOWS}",
    }
    for job_id in (unplaced, delayed, waiting, queued):  # queued last: waiting's cancel
        cli = Running(monkeypatch, url, "logs", "-f", job_id)
        cli.err.wait_for(SHOWS)
        assert http.delete(f"/jobs/{job_id}").status_code == 200
        assert cli.exit_code() == 1
        note, ended = cli.err.getvalue(), f"{job_id} failed\n"
        assert note.endswith(ended) and cli.out.getvalue() == ""
        note = note.removesuffix(ended)
        if job_id == delayed:
            due = r"\d\d:\d\d:\d\d \(in \d+ min( \d+ s)?\)"  # 10 min, less what passed
            assert re.fullmatch(f"{job_id} is delayed until {due}: {SHOWS}", note), note
        else:
            assert note == said[job_id]


def test_logs_f_of_a_job_that_has_started_says_nothing_of_it(
    served: tuple[str, httpx.Client], cli: Cli
) -> None:
    url, http = served
    job_id = running(http)
    send(http, job_id, "out\n", 0)
    report(http, job_id, "done", exit_code=0)
    assert cli(url, "logs", "-f", job_id) == (0, "out\n", "")


@pytest.mark.parametrize(
    ("secs", "said"),
    [
        (0.2, "1 s"),
        (42, "42 s"),
        (240, "4 min"),
        (245, "4 min 5 s"),
        (7800, "2 h 10 min"),
        (3 * 86400 + 59, "3 d"),
        (86400 + 3600, "1 d 1 h"),
    ],
)
def test_a_wait_is_said_in_its_two_largest_units(secs: float, said: str) -> None:
    assert _wait(secs) == said


def test_a_delay_is_said_at_the_users_clock_and_how_far_off() -> None:
    now = 1_800_000_000.0
    clock = time.strftime("%H:%M:%S", time.localtime(now + 300))
    assert _until(now + 300, now) == f"{clock} (in 5 min)"
    assert _until(now - 1, now).endswith(" (due now)")
    assert _until(now + 2 * 86400, now).startswith(
        time.strftime("%Y-%m-%d ", time.localtime(now + 2 * 86400))
    )


def test_logs_of_an_unknown_job_is_an_error(served: tuple[str, httpx.Client], cli: Cli) -> None:
    url, _ = served
    for argv in (["logs", "job-999"], ["logs", "-f", "job-999"]):
        assert cli(url, *argv) == (1, "", "error: job not found (404)\n")


def test_logs_of_an_unreachable_scheduler_is_an_error(cli: Cli) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for argv in (["logs", "job-1"], ["logs", "-f", "job-1"], ["events"]):
        code, out, err = cli(url, *argv)
        assert (code, out) == (1, "")
        assert err.startswith(f"error: cannot reach the scheduler at {url}"), err


def test_logs_f_of_a_cancelled_job_says_it_failed(
    served: tuple[str, httpx.Client], cli: Cli
) -> None:
    url, http = served
    job_id = http.post("/jobs", json={"command": "sleep 60"}).json()["job_id"]
    assert http.delete(f"/jobs/{job_id}").status_code == 200
    assert cli(url, "logs", "-f", job_id) == (1, "", f"{job_id} failed\n")


EVENT_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  (\S+) +(\S+ -> \S+) +(\S+)(  \(.*\))?")


def test_events_prints_a_line_per_status_change(served: tuple[str, httpx.Client], cli: Cli) -> None:
    url, http = served
    job_id = running(http)
    other = running(http, "other")
    report(http, job_id, "done", exit_code=0)
    report(http, other, "failed", exit_code=1)
    code, out, err = cli(url, "events", "--since-start", "--no-follow", "--job", job_id)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [EVENT_LINE.fullmatch(line).groups() for line in lines] == [  # type: ignore[union-attr]
        (job_id, "new -> pending", "n1", None),
        (job_id, "pending -> running", "n1", None),
        (job_id, "running -> done", "n1", None),
    ]
    assert lines[1].index("pending ->") == lines[0].index("new ->")  # aligned columns
    # A job that has ended: its events from the oldest kept, then the end (no waiting).
    assert cli(url, "events", "--job", job_id) == (0, out, "")
    code, out_, err = cli(url, "events", "--job", "job-999999")
    assert (code, out_) == (1, "") and "error: job not found" in err
    code, out, _ = cli(url, "events", "--since-start", "--no-follow", "--status", "running")
    assert [EVENT_LINE.fullmatch(line).group(1) for line in out.splitlines()] == [  # type: ignore[union-attr]
        job_id,
        other,
    ]


NOT_FOUND = "error: job not found (404)\n"


def test_events_of_an_unknown_job_is_its_404_however_it_is_read(
    served: tuple[str, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `logs -f`'s: a replay too (it read the events kept and then waited for more of a
    job that will never have any, or with --no-follow printed nothing and exited 0)."""
    url, http = served
    job_id = running(http)  # an event to resume after
    report(http, job_id, "done", exit_code=0)
    kept = Running(monkeypatch, url, "events", "--since-start", "--no-follow", "--json")
    assert kept.exit_code() == 0
    position = json.loads(kept.out.getvalue().splitlines()[0])["position"]
    for argv in (
        ["--since-start", "--no-follow"],
        ["--since-start"],
        ["--json", "--since-start"],
        [],
        ["--no-follow"],
        ["--after", position],
    ):
        cli = Running(monkeypatch, url, "events", "--job", "job-999999", *argv)
        assert cli.exit_code() == 1, argv
        assert (cli.out.getvalue(), cli.err.getvalue()) == ("", NOT_FOUND), argv


def failed_then_retried(http: httpx.Client) -> str:
    """A job that ran and failed (no retry of its own), then retried by hand: pending again."""
    job_id = str(http.post("/jobs", json={"command": "make", "max_retries": 0}).json()["job_id"])
    report(http, job_id, "running")
    report(http, job_id, "failed", exit_code=1)
    assert http.post(f"/jobs/{job_id}/retry").status_code == 200
    return job_id


def changes(out: str) -> list[str]:
    return [EVENT_LINE.fullmatch(line).group(2) for line in out.splitlines()]  # type: ignore[union-attr]


RETRIED = ["new -> pending", "pending -> running", "running -> failed", "failed -> pending"]


def test_events_of_a_job_replayed_show_a_retry_after_its_first_ending(
    served: tuple[str, httpx.Client], cli: Cli
) -> None:
    """Replayed (--since-start, or a job that has ended), every event of the job up to now,
    a manual retry's too; ended now, the command ends then."""
    url, http = served
    job_id = failed_then_retried(http)
    report(http, job_id, "running")
    report(http, job_id, "done", exit_code=0)
    every = [*RETRIED, "pending -> running", "running -> done"]
    for argv in (["--since-start"], [], ["--since-start", "--no-follow"]):
        code, out, err = cli(url, "events", "--job", job_id, *argv)
        assert (code, changes(out), err) == (0, every, ""), argv


def test_events_of_a_job_replayed_follow_it_on_if_it_has_not_ended(
    served: tuple[str, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, http = served
    job_id = failed_then_retried(http)
    cli = Running(monkeypatch, url, "events", "--since-start", "--job", job_id)
    cli.out.wait_for("failed -> pending")  # the replay, past the first ending
    report(http, job_id, "running")
    report(http, job_id, "done", exit_code=0)
    assert cli.exit_code() == 0
    assert changes(cli.out.getvalue()) == [*RETRIED, "pending -> running", "running -> done"]


def test_events_json_is_one_object_a_line_and_resumes_after_a_position(
    served: tuple[str, httpx.Client], cli: Cli
) -> None:
    url, http = served
    job_id = running(http)
    report(http, job_id, "done", exit_code=0)
    argv = ["events", "--no-follow", "--job", job_id, "--json"]
    code, out, _ = cli(url, *argv, "--since-start")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [e["status"] for e in events] == ["pending", "running", "done"]
    assert {e["job_id"] for e in events} == {job_id}
    assert events[1]["old_status"] == "pending" and events[1]["node_id"] == "n1"
    assert events[0]["number"] < events[1]["number"] < events[2]["number"]
    code, out, _ = cli(url, *argv, "--after", events[0]["position"])
    assert [json.loads(line)["status"] for line in out.splitlines()] == ["running", "done"]


def test_events_bad_input_is_the_servers_message(
    served: tuple[str, httpx.Client], cli: Cli
) -> None:
    url, _ = served
    code, out, err = cli(url, "events", "--status", "bogus")
    assert (code, out) == (1, "")
    assert err.startswith("error: invalid status"), err
    code, _, err = cli(url, "events", "--after", "nope")
    assert code == 1 and err.startswith("error: invalid after"), err


def test_events_of_a_job_follow_it_until_it_ends_or_are_interrupted(
    served: tuple[str, httpx.Client],
) -> None:
    """A real process: following one job's events ends with its end (exit 0, as `logs -f`);
    stopped by SIGINT as Ctrl-C does before that: exit 130, no traceback."""
    url, http = served
    job_id = running(http)
    ended = follow_events(url, http, job_id, end=True)
    assert ended == 0
    assert follow_events(url, http, running(http), end=False) == 130


def follow_events(url: str, http: httpx.Client, job_id: str, end: bool) -> int:
    """`events --since-start --job` of running `job_id` as a process: with `end`, the job
    ends while it follows and the process must exit by itself; else it is sent SIGINT."""
    env = {**os.environ, "SCHEDULER_URL": url}
    env.pop("TINYAWS_API_KEY", None)
    argv = [sys.executable, "-m", "scheduler", "events", "--since-start", "--job", job_id]
    # A terminal's command hears Ctrl-C; pytest-xdist's workers ignore SIGINT, which a child
    # inherits (Python then installs no handler of its own): set it back, as a shell does.
    with subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:
        lines: queue.Queue[bytes] = queue.Queue()
        read = threading.Thread(target=lambda: list(map(lines.put, proc.stdout or [])))
        read.start()
        try:
            assert b"new -> pending" in lines.get(timeout=DEADLINE)
            assert b"pending -> running" in lines.get(timeout=DEADLINE)
            if end:
                report(http, job_id, "done", exit_code=0)  # while it follows
                assert b"running -> done" in lines.get(timeout=DEADLINE)
            else:
                proc.send_signal(signal.SIGINT)
            code = proc.wait(DEADLINE)
            assert b"Traceback" not in (proc.stderr.read() if proc.stderr else b"")
            return code
        finally:
            proc.kill()
            read.join(DEADLINE)


# `logs -f` and `events` against scripted answers (httpx.MockTransport): what the command
# prints of what the client's follow reads, and how it says the follow's errors.


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
SCRIPTED = "http://scheduler.test"


def scripted(*answers: Answer) -> tuple[Client, list[httpx.Request]]:
    """A client whose requests get these answers, one each, in order; and its requests."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[len(sent) - 1](request)

    return Client(SCRIPTED, transport=httpx.MockTransport(handle)), sent


def run_cli(client: Client, *argv: str) -> tuple[int, str, str]:
    """`scheduler ARGV...` with this client: (exit status, stdout, stderr)."""
    args = build_parser(argv[0]).parse_args(list(argv))
    command = {"logs": logs, "events": events}[argv[0]]
    out, err = io.StringIO(), io.StringIO()
    with client:
        code = run(command, args, client, out, err)
    return code, out.getvalue(), err.getvalue()


def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused")


def test_logs_f_resumes_after_the_last_whole_event_and_shows_none_twice(
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
    code, out, err = run_cli(client, "logs", "-f", "job-1")
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
    code, out, err = run_cli(client, "logs", "-f", "job-4")
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
    assert run_cli(client, "logs", "-f", "job-1")[0] == code


def test_the_first_connection_is_not_retried() -> None:
    client, sent = scripted(unreachable)
    code, out, err = run_cli(client, "events")
    assert (code, out, len(sent)) == (1, "", 1)
    assert err == f"error: cannot reach the scheduler at {SCRIPTED}: connection refused\n"
    client, sent = scripted(lambda r: httpx.Response(503, text="no shard\n"))
    assert run_cli(client, "events") == (1, "", "error: no shard (503)\n")
    assert len(sent) == 1


def test_a_refusal_on_a_reconnection_ends_the_command_with_the_hint() -> None:
    client, _ = scripted(
        lambda r: stream("retry: 0\n\n", output("1-0", "one\n"), whole=True),
        lambda r: httpx.Response(401, text="unauthorized\n"),
    )
    assert run_cli(client, "logs", "-f", "job-1") == (
        1,
        "one\n",
        "error: unauthorized (401)\n"
        "hint: the scheduler needs an API key: set TINYAWS_API_KEY to it\n",
    )


def test_an_answer_that_is_not_an_event_stream_is_an_error() -> None:
    client, _ = scripted(lambda r: httpx.Response(200, text="hello\n"))
    code, out, err = run_cli(client, "events")
    assert (code, out) == (1, "")
    assert (
        err.startswith("error: the scheduler answered text/plain") and "not an event stream" in err
    )


def test_events_no_follow_ends_with_the_stream() -> None:
    client, sent = scripted(lambda r: stream("retry: 0\n\n", whole=True))
    assert run_cli(client, "events", "--no-follow") == (0, "", "")
    assert len(sent) == 1 and sent[0].url.params["follow"] == "0"


def test_events_say_those_dropped_and_print_each_with_its_position() -> None:
    change = {"number": 7, "job_id": "job-1", "status": "running", "at": "2026-12-06T01:22:24Z"}
    client, _ = scripted(
        lambda r: stream(
            'id: 5-0\nevent: dropped\ndata: {"shard": 0}\n\n',
            f"id: 6-0\nevent: job\ndata: {json.dumps(change)}\n\n",
            whole=True,
        )
    )
    code, out, err = run_cli(client, "events", "--no-follow", "--json")
    assert code == 0 and json.loads(out) == {**change, "position": "6-0"}
    assert err == "[... some events of shard 0 dropped (EVENTS_RETAIN_SECS) ...]\n"


def job_answer(status: str) -> Answer:
    """GET /jobs/job-1's answer: the job, with this status."""
    job = {"job_id": "job-1", "node_id": "n1", "command": "make", "status": status}
    body = {**job, "retry_count": 0, "created_at": "2026-12-06T01:22:24Z"}
    return lambda r: httpx.Response(200, json=body)


def change(position: str, old: str, new: str) -> str:
    data = {"number": 1, "job_id": "job-1", "old_status": old, "status": new}
    data["at"] = "2026-12-06T01:22:24Z"
    return f"id: {position}\nevent: job\ndata: {json.dumps(data)}\n\n"


def test_events_of_a_job_followed_from_now_end_with_its_next_ending() -> None:
    """A manual retry after it is a new run, followed by a command of its own."""
    client, sent = scripted(
        job_answer("running"),
        lambda r: stream(
            change("1-0", "running", "failed"), change("2-0", "failed", "pending"), whole=True
        ),
    )
    code, out, err = run_cli(client, "events", "--job", "job-1")
    assert (code, changes(out), err) == (0, ["running -> failed"], "")
    assert [r.url.path for r in sent] == ["/jobs/job-1", "/events"]
    assert "after" not in sent[1].url.params and "follow" not in sent[1].url.params


def test_events_of_a_job_replayed_then_followed_from_where_the_replay_ended() -> None:
    client, sent = scripted(
        job_answer("pending"),
        lambda r: stream(
            change("1-0", "running", "failed"), change("2-0", "failed", "pending"), whole=True
        ),
        lambda r: stream(
            change("3-0", "pending", "running"),
            change("4-0", "running", "done"),
            change("5-0", "done", "pending"),
            whole=True,
        ),
    )
    code, out, err = run_cli(client, "events", "--job", "job-1", "--since-start")
    assert (code, err) == (0, "")
    assert changes(out) == [
        "running -> failed",
        "failed -> pending",
        "pending -> running",
        "running -> done",
    ]
    replay, follow = (dict(r.url.params) for r in sent[1:])
    assert replay == {"job_id": "job-1", "after": "0", "follow": "0"}
    assert follow == {"job_id": "job-1", "after": "2-0"}


def test_events_of_a_job_replayed_to_its_ending_end_there() -> None:
    """It ended while the replay read (GET /jobs/{id} said pending): no follow after it."""
    client, sent = scripted(
        job_answer("pending"),
        lambda r: stream(
            change("1-0", "pending", "running"), change("2-0", "running", "done"), whole=True
        ),
    )
    code, out, _ = run_cli(client, "events", "--job", "job-1", "--since-start")
    assert (code, changes(out), len(sent)) == (0, ["pending -> running", "running -> done"], 2)

"""The command-line client against a running API: the original CLI's output lines, --json,
--wait, auth, and clear errors."""

from __future__ import annotations

import argparse
import io
import json
import re
import shlex
import threading
import time
from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest
import redis

from scheduler.cli import client as cli_client
from scheduler.cli import listing, refusals
from scheduler.cli.main import main as cli_main
from scheduler.cli.output import (
    HINTS,
    attempt_line,
    exit_status,
    format_job,
    go_quote,
    progress,
    signalled,
    unplaced_warning,
)
from scheduler.client import Client
from scheduler.client.errors import api_error
from scheduler.client.retrying import Policy
from scheduler.config import Settings
from scheduler.models.job import PENDING_REASONS
from scheduler.models.unplaced import WAITS_BY_ITSELF
from scheduler.store.keys import Keys
from tests.cli.conftest import Cli
from tests.keys import API_KEY as KEY
from tests.processes import api_replicas, scheduler_env, unique_prefix
from tests.redis_server import free_port


@pytest.fixture(scope="module")
def open_prefix() -> str:
    """The open API's Redis prefix, new each time the module's API is made (unique_prefix)."""
    return unique_prefix("client-open")


# The module's node stays live however long its tests take on a loaded machine (it is
# registered once, at the start, and no agent beats for it): past the default 30 s, jobs found
# no healthy node.
LIVE_NODES = {"NODE_TTL_SECS": "600"}


@pytest.fixture(scope="module")
def api(redis_url: str, open_prefix: str) -> Iterator[str]:
    """One API process, open (no key)."""
    with api_replicas(1, scheduler_env(redis_url, open_prefix, **LIVE_NODES)) as urls:
        register(urls[0], "node-1")
        yield urls[0]


@pytest.fixture(scope="module")
def secured(redis_url: str) -> Iterator[str]:
    env = scheduler_env(redis_url, unique_prefix("client-auth"), TINYAWS_API_KEY=KEY, **LIVE_NODES)
    with api_replicas(1, env) as urls:
        register(urls[0], "node-1")
        yield urls[0]


def register(url: str, node: str) -> None:
    body = {"id": node, "hostname": node, "cpu_count": 1, "role": "compute"}
    assert httpx.post(f"{url}/nodes/register", json=body).status_code == 201


def finish(url: str, job_id: str, status: str, code: int, stdout: str, stderr: str = "") -> None:
    """Play the agent: claim the job and report a result."""
    running = {"status": "running", "exit_code": None, "stdout": "", "stderr": ""}
    assert httpx.patch(f"{url}/jobs/{job_id}", json=running).status_code == 200
    result = {"status": status, "exit_code": code, "stdout": stdout, "stderr": stderr}
    assert httpx.patch(f"{url}/jobs/{job_id}", json=result).status_code == 200


def test_submit_prints_the_original_line(api: str, cli: Cli) -> None:
    code, out, err = cli(api, "submit", "echo hi")
    assert code == 0 and err == ""
    job_id = out.split()[1]
    assert out == f"submitted {job_id} on node node-1 (status=pending)\n"


def test_submit_sends_env_vars_instance_and_service_fields(api: str, cli: Cli) -> None:
    argv = ["submit", "serve", "--env", "A=1", "--env", "B=x=y", "--service", "--port", "8080"]
    code, out, _ = cli(api, *argv, "--json")
    assert code == 0
    job = json.loads(out)
    assert job["env_vars"] == {"A": "1", "B": "x=y"}
    assert job["job_type"] == "service" and job["port"] == 8080
    assert httpx.get(f"{api}/jobs/{job['job_id']}").json() == job


def test_submit_failure_prints_code_and_body_and_exits_1(api: str, cli: Cli) -> None:
    code, out, err = cli(api, "submit", "")
    assert code == 1 and out == ""
    assert err == "error: command or deploy_url is required (400)\n"
    code, _, err = cli(api, "submit", "x", "--instance", "i-1")
    assert code == 1 and err == "error: instance not found (503)\n"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--env", "NOEQUALS"], "--env 'NOEQUALS': use NAME=VALUE"),
        (["--select", "zone"], "--select 'zone': use KEY=VALUE or KEY=VALUE,VALUE"),
        (["--idempotency-key", "a b"], "'a b': use 1 to 255 visible ASCII characters"),
        (["--idempotency-key", "clé"], "'clé': use 1 to 255 visible ASCII characters"),
        (["--idempotency-key", "k" * 256], "use 1 to 255 visible ASCII characters"),
    ],
)
def test_a_bad_options_value_is_a_usage_error_before_sending(
    api: str, cli: Cli, argv: list[str], said: str
) -> None:
    """Exit 2, as argparse's own usage errors (a scheduler's refusal exits 1), the message
    as every command says an error; --idempotency-key by the scheduler's own rule."""
    before = len(httpx.get(f"{api}/jobs").json())
    code, out, err = cli(api, "submit", "x", *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {argv[0]} ") and err.endswith(f"{said}\n"), err
    assert err.count("\n") == 1
    assert len(httpx.get(f"{api}/jobs").json()) == before
    code, _, _ = cli(api, "submit", "x", "--idempotency-key", "k" * 255, "--json")
    assert code == 0  # the longest key the scheduler takes


@pytest.mark.parametrize("bad", ["-1", "0", "nan", "soon"])
def test_a_bad_poll_is_a_usage_error_before_anything_is_submitted(
    api: str, cli: Cli, bad: str
) -> None:
    """--poll-secs is read with the options: the scheduler's refusal of the wait came after
    the submit, and a retry of the command made the job twice."""
    before = len(httpx.get(f"{api}/jobs").json())
    with pytest.raises(SystemExit) as ended:
        cli(api, "submit", "echo x", "--wait", "--poll-secs", bad)
    assert ended.value.code == 2
    assert len(httpx.get(f"{api}/jobs").json()) == before


def test_the_poll_error_names_the_option_and_its_rule(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["status", "job-1", "--wait", "--poll-secs", "-1"])
    err = capsys.readouterr().err
    assert "argument --poll-secs: '-1': use a number of seconds above 0" in err


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--priority", "5000"], "error: --priority: must be an integer between -1000 and 1000"),
        (["--delay", "400d"], "error: --delay: "),  # a length the CLI reads, past the API's most
        (["--retry-backoff", "86401"], "error: --retry-backoff: "),
    ],
)
def test_a_refused_option_is_named_as_typed(
    api: str, cli: Cli, option: list[str], said: str
) -> None:
    """The API names its field (`priority`, `delay_secs`); the user typed the option."""
    code, out, err = cli(api, "submit", "true", *option)
    assert (code, out) == (1, "") and err.startswith(said), err
    code, out, err = cli(api, "schedule", "add", "s", "--every", "60", "true", *option)
    assert (code, out) == (1, "") and err.startswith(said), err


def test_status_prints_the_job_as_the_original(api: str, cli: Cli) -> None:
    job = httpx.post(f"{api}/jobs", json={"command": 'echo "hi"\tthere'}).json()
    finish(api, job["job_id"], "done", 0, "hi\tthere\n", "warn\n")
    code, out, _ = cli(api, "status", job["job_id"])
    assert code == 0
    assert out == (
        f'job_id={job["job_id"]} node_id=node-1 status=done command="echo \\"hi\\"\\tthere"\n'
        "exit_code=0\nstdout:\nhi\tthere\nstderr:\nwarn\n"
    )


# A pending job's place in its node's queue (GET /jobs/{id}/place), the line after its own:
# why it has not started. The module's API holds the other tests' jobs: any place.
QUEUE_LINE = re.compile(r"queue: (first|\d+ ahead of it) in the queue of node-1 \(\d+ queued\)")


def test_status_of_a_pending_job_has_no_exit_code_and_says_its_place(api: str, cli: Cli) -> None:
    job = httpx.post(f"{api}/jobs", json={"command": "true"}).json()
    code, out, _ = cli(api, "status", job["job_id"])
    assert code == 0
    line, place = out.splitlines()
    assert line == f'job_id={job["job_id"]} node_id=node-1 status=pending command="true"'
    assert QUEUE_LINE.fullmatch(place), place


def test_the_place_line_comes_before_a_retried_jobs_output(api: str, cli: Cli) -> None:
    """A job pending again after a failed attempt keeps that attempt's stderr: its place
    came after the stderr block, read as its last line."""
    job_id = httpx.post(f"{api}/jobs", json={"command": "x", "max_retries": 1}).json()["job_id"]
    finish(api, job_id, "failed", 3, "out\n", "err\n")
    code, out, _ = cli(api, "status", job_id)
    lines = out.splitlines()
    assert code == 0 and "status=pending" in lines[0] and QUEUE_LINE.fullmatch(lines[1])
    assert lines[2:] == ["stderr:", "err"]  # the stderr a retry keeps, after the place
    httpx.delete(f"{api}/jobs/{job_id}")


def test_json_prints_the_job_as_the_client_reads_it(
    api: str, open_prefix: str, cli: Cli, redis_url: str
) -> None:
    """--json prints the typed answer (scheduler.client's Job) encoded: every field the API
    returns that a job has, as the API encodes it (from the same model). A field it knows
    nothing about (a newer scheduler's) is not one of its answer's, so not printed."""
    job_id = httpx.post(f"{api}/jobs", json={"command": "true"}).json()["job_id"]
    key, r = Keys(open_prefix).job(job_id), redis.Redis.from_url(redis_url)
    try:
        raw = r.get(key)
        assert isinstance(raw, bytes)
        r.set(key, raw[:-1] + b',"zz_newer":{"a":[1,"b"]}}')
    finally:
        r.close()
    served = httpx.get(f"{api}/jobs/{job_id}").json()
    assert served["zz_newer"] == {"a": [1, "b"]}
    code, out, _ = cli(api, "status", job_id, "--json")
    known = {name: value for name, value in served.items() if name != "zz_newer"}
    assert code == 0 and json.loads(out) == known
    # The original's format stays the original's (its place the line after).
    code, out, _ = cli(api, "status", job_id)
    assert out.splitlines()[0] == f'job_id={job_id} node_id=node-1 status=pending command="true"'


def test_status_of_an_unknown_job_is_an_error(api: str, cli: Cli) -> None:
    code, out, err = cli(api, "status", "job-999999")
    assert code == 1 and out == ""
    assert err == "error: job not found (404)\n"


def test_submit_wait_prints_the_jobs_output(api: str, cli: Cli) -> None:
    # No agent here: a fake one finishes the job while the client waits.
    import threading

    def agent() -> None:
        for _ in range(200):
            pending = httpx.get(f"{api}/jobs", params={"status": "pending"})
            for job in pending.json():
                if job["command"] == "echo waited":
                    finish(api, job["job_id"], "done", 0, "waited\n")
                    return
            threading.Event().wait(0.05)

    thread = threading.Thread(target=agent)
    thread.start()
    code, out, err = cli(api, "submit", "echo waited", "--wait", "--poll-secs", "0.05")
    thread.join()
    assert code == 0
    # stdout is the job's output (`out=$(scheduler submit CMD --wait)`); the submitted line
    # and the status changes seen while waiting are on stderr.
    assert out == "waited\n"
    said = err.splitlines()
    assert said[0].startswith("submitted job-")
    job_id = said[0].split()[1]
    assert said[-1] == f"{job_id} done on node-1 (exit_code=0)"


def test_submit_wait_long_polls_instead_of_sleeping(api: str, cli: Cli) -> None:
    # With --poll-secs 30 a sleeping client would take 30 s per step; a long-poll is
    # answered when the fake agent changes the job.
    import threading
    import time

    def agent() -> None:
        for _ in range(200):
            pending = httpx.get(f"{api}/jobs", params={"status": "pending"})
            for job in pending.json():
                if job["command"] == "echo long-polled":
                    threading.Event().wait(0.2)  # the client is waiting by now
                    finish(api, job["job_id"], "done", 0, "long-polled\n")
                    return
            threading.Event().wait(0.05)

    thread = threading.Thread(target=agent)
    thread.start()
    began = time.monotonic()
    code, out, _ = cli(api, "submit", "echo long-polled", "--wait", "--poll-secs", "30")
    thread.join()
    assert code == 0 and out == "long-polled\n"
    assert time.monotonic() - began < 15


def test_status_wait_on_a_failed_job_exits_with_its_code(api: str, cli: Cli) -> None:
    job = httpx.post(f"{api}/jobs", json={"command": "false"}).json()
    finish(api, job["job_id"], "failed", 2, "", "bad\n")  # first failure: retried
    finish(api, job["job_id"], "failed", 2, "", "bad\n")
    code, out, _ = cli(api, "status", job["job_id"], "--wait", "--json")
    # The command's own code, as submit --wait (with --json too).
    assert code == 2 and json.loads(out)["status"] == "failed"
    code, out, _ = cli(api, "status", job["job_id"], "--wait")
    assert code == 2
    assert out.splitlines()[:2] == [
        f'job_id={job["job_id"]} node_id=node-1 status=failed command="false"',
        "exit_code=2",
    ]


def test_list_prints_one_line_per_job_and_filters(api: str, cli: Cli) -> None:
    job = httpx.post(f"{api}/jobs", json={"command": "echo listed"}).json()
    finish(api, job["job_id"], "done", 0, "listed\n")
    code, out, _ = cli(api, "list", "--status", "done")
    assert code == 0
    line = f'job_id={job["job_id"]} node_id=node-1 status=done command="echo listed"'
    assert line in out.splitlines()
    assert all(" status=done " in row for row in out.splitlines())
    code, out, _ = cli(api, "list", "--node-id", "node-1", "--json")
    assert job["job_id"] in [j["job_id"] for j in json.loads(out)]


def test_the_api_key_is_sent(secured: str, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINYAWS_API_KEY", raising=False)
    code, _, err = cli(secured, "submit", "echo hi")
    assert code == 1 and err == (
        "error: unauthorized (401)\n"
        "hint: the scheduler needs an API key: set TINYAWS_API_KEY to it\n"
    )
    monkeypatch.setenv("TINYAWS_API_KEY", "wrong")
    for argv in (["list"], ["status", "job-1"], ["nodes"], ["cancel", "job-1"]):
        code, out, err = cli(secured, *argv)
        assert (code, out) == (1, ""), argv
        assert err.splitlines()[-1] == (
            "hint: the scheduler refused TINYAWS_API_KEY: set it to the scheduler's key, or to a "
            "named key not revoked (an admin's `scheduler key list` shows them)"
        )
    monkeypatch.setenv("TINYAWS_API_KEY", KEY)
    code, out, _ = cli(secured, "submit", "echo hi")
    assert code == 0 and out.startswith("submitted job-")
    code, out, _ = cli(secured, "list", "--json")
    assert code == 0 and len(json.loads(out)) == 1


def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's tries follow each other at once (its retry policy's pauses are 0)."""
    monkeypatch.setattr(Policy, "pause", lambda self, retried: 0.0)


def test_an_unreachable_scheduler_is_a_clear_error(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_pauses(monkeypatch)
    url = f"http://127.0.0.1:{free_port()}"
    for argv in (["submit", "echo hi"], ["status", "job-1"], ["list"], ["nodes"]):
        code, out, err = cli(url, *argv)
        assert code == 1 and out == ""
        assert err.startswith(f"error: cannot reach the scheduler at {url}")
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("echo hi", '"echo hi"'),
        ('say "x"', '"say \\"x\\""'),
        ("a\\b", '"a\\\\b"'),
        ("l1\nl2\r\t", '"l1\\nl2\\r\\t"'),
        ("\x00\x1b\x7f", '"\\x00\\x1b\\x7f"'),
        ("héllo ✓", '"héllo ✓"'),
        ("\u200b", '"\\u200b"'),
    ],
)
def test_commands_are_quoted_like_go(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@pytest.mark.parametrize(
    ("stdout", "stderr", "printed"),
    [
        ("hi\n", "", "stdout:\nhi\n"),
        ("hi", "", "stdout:\nhi\n"),  # the next line starts on a line of its own
        ("", "dependency job-1 ended failed", "stderr:\ndependency job-1 ended failed\n"),
        ("a\nb", "c", "stdout:\na\nb\nstderr:\nc\n"),
    ],
)
def test_format_job_ends_each_output_on_a_line_end(stdout: str, stderr: str, printed: str) -> None:
    job = {"job_id": "job-2", "node_id": "n", "status": "failed", "stdout": stdout}
    job["stderr"] = stderr
    assert format_job(job) == 'job_id=job-2 node_id=n status=failed command=""\n' + printed


def test_format_job_omits_empty_fields_but_not_exit_code_zero() -> None:
    job = {"job_id": "job-1", "node_id": "n", "status": "done", "command": "", "exit_code": 0}
    assert format_job(job) == 'job_id=job-1 node_id=n status=done command=""\nexit_code=0\n'


def test_a_job_killed_by_a_signal_shows_the_signal(api: str, cli: Cli) -> None:
    """The reference agent reports 128+n (and a stderr line); the CLI names the signal, and
    `--wait` exits with the code as a shell does. The Rust agent's -1 stays a bare -1."""
    job = httpx.post(f"{api}/jobs", json={"command": "sleep 1000", "max_retries": 0}).json()
    finish(api, job["job_id"], "failed", 137, "", "signal: SIGKILL (exit_code 137)\n")
    code, out, err = cli(api, "status", job["job_id"], "--wait")
    assert code == 137, err
    assert out.splitlines()[1] == "exit_code=137 (signal: SIGKILL)"
    ended = {"job_id": "job-9", "node_id": "n", "status": "failed", "exit_code": 137}
    assert progress(ended) == "job-9 failed on n (exit_code=137, signal: SIGKILL)\n"
    assert exit_status(ended) == 137  # `submit --wait`'s exit status, as a shell's
    attempt = {"attempt": 1, "node_id": "n", "reason": "failed", "exit_code": 143}
    assert attempt_line("job-9", attempt) == (
        "job-9 attempt 1 on n: failed (exit_code=143, signal: SIGTERM)\n"
    )
    assert [signalled(c) for c in (-1, 0, 1, 128, 130, 255, None)] == [
        "",
        "",
        "",
        "",
        "SIGINT",
        "",
        "",
    ]


def test_cancel_prints_the_cancelled_job(api: str, cli: Cli) -> None:
    job = httpx.post(f"{api}/jobs", json={"command": "true"}).json()
    code, out, err = cli(api, "cancel", job["job_id"])
    assert (code, err) == (0, "")
    reason = "status=failed failure_reason=cancelled"
    assert out == f'job_id={job["job_id"]} node_id=node-1 {reason} command="true"\n'
    code, out, err = cli(api, "cancel", job["job_id"])
    assert (code, out) == (1, "")
    assert err == "error: job already finished (409)\n"
    code, _, err = cli(api, "cancel", "job-999999")
    assert code == 1 and err == "error: job not found (404)\n"


def test_cancel_wait_waits_for_the_agent(api: str, cli: Cli) -> None:
    job = httpx.post(f"{api}/jobs", json={"command": "sleep 600"}).json()
    running = {"status": "running", "exit_code": None, "stdout": "", "stderr": ""}
    assert httpx.patch(f"{api}/jobs/{job['job_id']}", json=running).status_code == 200

    def agent_stops_it() -> None:
        time.sleep(0.5)
        stopped = {"status": "cancelled", "exit_code": -1}
        assert httpx.patch(f"{api}/jobs/{job['job_id']}", json=stopped).status_code == 200

    agent = threading.Thread(target=agent_stops_it)
    agent.start()
    code, out, _ = cli(api, "cancel", job["job_id"], "--wait", "--poll-secs", "5")
    agent.join()
    assert code == 0 and "status=failed failure_reason=cancelled" in out and "exit_code=-1" in out


def test_cancel_takes_several_ids_and_goes_on_after_an_error(api: str, cli: Cli) -> None:
    """`scheduler cancel job-1 job-2 job-3`: each in turn, a refused one said on its line
    (the next still tried), exit 0 only when every one was cancelled."""
    first, second = (httpx.post(f"{api}/jobs", json={"command": "true"}).json() for _ in "ab")
    reason = "status=failed failure_reason=cancelled"
    code, out, err = cli(api, "cancel", first["job_id"], "job-999999", second["job_id"])
    assert (code, err) == (1, "error: job not found (404)\n")
    assert out == "".join(
        f'job_id={job["job_id"]} node_id=node-1 {reason} command="true"\n'
        for job in (first, second)
    )
    code, out, err = cli(api, "cancel", first["job_id"], second["job_id"])
    assert (code, out) == (1, "")
    assert err == "error: job already finished (409)\n" * 2
    third, fourth = (httpx.post(f"{api}/jobs", json={"command": "true"}).json() for _ in "ab")
    code, out, err = cli(api, "cancel", third["job_id"], fourth["job_id"], "--wait", "--json")
    assert (code, err) == (0, "")
    # A job a line (JSON lines): each line one JSON document.
    jobs = [json.loads(line) for line in out.splitlines()]
    assert [job["job_id"] for job in jobs] == [third["job_id"], fourth["job_id"]]
    assert {job["status"] for job in jobs} == {"failed"}


def test_cancel_of_several_stops_at_a_refused_key(
    secured: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every further id would be sent with the same refused key: one error and its hint."""
    monkeypatch.delenv("TINYAWS_API_KEY", raising=False)
    code, out, err = cli(secured, "cancel", "job-1", "job-2", "job-3")
    assert (code, out) == (1, "")
    assert err == (
        "error: unauthorized (401)\n"
        "hint: the scheduler needs an API key: set TINYAWS_API_KEY to it\n"
    )


def _agent_steps(url: str, job_id: str, *steps: dict[str, object]) -> threading.Thread:
    """Play the agent: each report half a second after the last (the client long-polls)."""

    def run() -> None:
        for step in steps:
            time.sleep(0.5)
            if "wait" in step:  # no report: a while the job stays as it is
                time.sleep(float(str(step["wait"])))
                continue
            body = {"exit_code": None, "stdout": "", "stderr": ""} | step
            assert httpx.patch(f"{url}/jobs/{job_id}", json=body).status_code == 200

    thread = threading.Thread(target=run)
    thread.start()
    return thread


RUNNING = {"status": "running"}
DONE = {"status": "done", "exit_code": 0, "stdout": "ok\n"}


def test_submit_wait_prints_each_status_change(api: str, cli: Cli) -> None:
    def agent() -> None:
        for _ in range(200):
            for job in httpx.get(f"{api}/jobs", params={"status": "pending"}).json():
                if job["command"] == "echo changes":
                    _agent_steps(api, job["job_id"], RUNNING, DONE).join()
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=agent)
    thread.start()
    code, out, err = cli(api, "submit", "echo changes", "--wait", "--poll-secs", "5")
    thread.join()
    job_id = err.split()[1]
    assert code == 0 and out == "ok\n"
    assert err.splitlines() == [
        f"submitted {job_id} on node node-1 (status=pending)",
        f"{job_id} running on node-1",
        f"{job_id} done on node-1 (exit_code=0)",  # (its attempt's end: the job's, said once)
    ]


def test_submit_wait_prints_each_attempt_and_exits_with_the_commands_code(
    api: str, cli: Cli
) -> None:
    """A failure retried, then the last attempt's failure: each attempt on stderr (the last,
    the job's end, as the job's line), and the exit status is the command's own (3), not a
    bare 1."""

    def agent() -> None:
        for _ in range(400):
            for job in httpx.get(f"{api}/jobs", params={"status": "pending"}).json():
                if job["command"] == "exit 3":
                    failed = {**DONE, "status": "failed", "exit_code": 3}
                    _agent_steps(api, job["job_id"], RUNNING, failed).join()
                    if job["retry_count"] == 1:
                        return
            time.sleep(0.05)

    thread = threading.Thread(target=agent)
    thread.start()
    code, out, err = cli(api, "submit", "exit 3", "--max-retries", "1", "--wait")
    thread.join()
    job_id = err.split()[1]
    assert code == 3
    attempts = [
        f"{job_id} attempt 1 on node-1: failed (exit_code=3)",
        f"{job_id} attempt 2 on node-1: failed (exit_code=3)",
    ]
    assert [line for line in err.splitlines() if " attempt " in line] == attempts[:1]
    assert err.splitlines()[-1] == f"{job_id} failed on node-1 (exit_code=3)"
    code, out, _ = cli(api, "status", job_id, "--attempts")
    assert code == 0 and out.splitlines()[-2:] == attempts
    # With --json too: the job's fields and its attempts, one object (it left them out).
    code, out, _ = cli(api, "status", job_id, "--attempts", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["job_id"] == job_id
    assert [(a["attempt"], a["exit_code"]) for a in shown["attempts"]] == [(1, 3), (2, 3)]


def test_submit_wait_says_a_failure_once(api: str, cli: Cli) -> None:
    """The end is one line on stderr, as it came, before the job's own output: it was said
    again after the output (`job-3 failed (exit_code=3)`)."""

    def agent() -> None:
        for _ in range(400):
            for job in httpx.get(f"{api}/jobs", params={"status": "pending"}).json():
                if job["command"] == "exit 4":
                    failed = {"status": "failed", "exit_code": 4, "stdout": "o\n", "stderr": "e\n"}
                    _agent_steps(api, job["job_id"], RUNNING, failed).join()
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=agent)
    thread.start()
    argv = ["submit", "exit 4", "--max-retries", "0", "--idempotency-key", "said-once", "--wait"]
    code, out, err = cli(api, *argv)
    thread.join()
    job_id = err.split()[1]
    assert code == 4 and out == "o\n"
    assert err.splitlines() == [
        f"submitted {job_id} on node node-1 (status=pending)",
        f"{job_id} running on node-1",
        f"{job_id} failed on node-1 (exit_code=4)",
        "e",
    ]
    # The same key again answers the job, ended already: its end is said all the same.
    code, out, err = cli(api, *argv)
    assert (code, out) == (4, "o\n")
    assert err == (
        f"submitted {job_id} on node node-1 (status=failed)\n"
        f"{job_id} failed on node-1 (exit_code=4)\ne\n"
    )


def test_status_wait_prints_each_status_change(api: str, cli: Cli) -> None:
    job_id = httpx.post(f"{api}/jobs", json={"command": "true"}).json()["job_id"]
    thread = _agent_steps(api, job_id, RUNNING, DONE)
    code, out, err = cli(api, "status", job_id, "--wait", "--poll-secs", "5")
    thread.join()
    assert code == 0
    assert err.splitlines() == [
        f"{job_id} pending on node-1",
        f"{job_id} running on node-1",
        f"{job_id} done on node-1 (exit_code=0)",
    ]
    # The job each time it changed (not at every poll, as the original).
    assert [line for line in out.splitlines() if line.startswith("job_id=")] == [
        f'job_id={job_id} node_id=node-1 status={status} command="true"'
        for status in ("pending", "running", "done")
    ]
    code, out, err = cli(api, "status", job_id)
    assert (code, err) == (0, "")  # without --wait: no progress lines


def test_status_wait_prints_the_job_only_when_it_changed_and_exits_with_its_code(
    api: str, cli: Cli
) -> None:
    """It printed the same running job at every poll, and exited 0 for a failed job."""
    body = {"command": "false", "max_retries": 0}
    job_id = httpx.post(f"{api}/jobs", json=body).json()["job_id"]
    failed = {"status": "failed", "exit_code": 3}
    # Running for 2.5 s: two polls of 1 s ran out on the same job.
    thread = _agent_steps(api, job_id, RUNNING, {"status": "running", "wait": 2}, failed)
    code, out, _ = cli(api, "status", job_id, "--wait", "--poll-secs", "1")
    thread.join()
    assert code == 3
    assert [line.split()[2] for line in out.splitlines() if line.startswith("job_id=")] == [
        "status=pending",
        "status=running",
        "status=failed",
    ]


@pytest.fixture(scope="module")
def lister(redis_url: str) -> Iterator[str]:
    """An API of its own with five jobs of ~900 bytes each, and a 1 KiB page budget: a page
    holds one or two of them, fewer than asked for."""
    env = scheduler_env(redis_url, unique_prefix("client-list"), MAX_PAGE_BYTES="1024")
    with api_replicas(1, env) as urls:
        register(urls[0], "node-1")
        for n in range(1, 6):
            body = {"command": f"echo {n} " + "x" * 900}
            assert httpx.post(f"{urls[0]}/jobs", json=body).json()["job_id"] == f"job-{n}"
        yield urls[0]


def listed(out: str) -> list[int]:
    return [int(line.split()[0].removeprefix("job_id=job-")) for line in out.splitlines()]


@pytest.mark.parametrize(
    ("argv", "jobs", "more"),
    [
        ([], [1, 2, 3, 4, 5], ""),
        (["--limit", "5"], [1, 2, 3, 4, 5], ""),
        (["--limit", "3"], [1, 2, 3], "more: scheduler list --limit 3 --after job-3\n"),
        (["--limit", "2", "--after", "job-3"], [4, 5], ""),
        (
            ["--limit", "1", "--after", "job-3"],
            [4],
            "more: scheduler list --limit 1 --after job-4\n",
        ),
        (["--newest"], [5, 4, 3, 2, 1], ""),
        (
            ["--newest", "--limit", "2"],
            [5, 4],
            "more: scheduler list --limit 2 --newest --before job-4\n",
        ),
        (
            ["--newest", "--limit", "2", "--before", "job-4"],
            [3, 2],
            "more: scheduler list --limit 2 --newest --before job-2\n",
        ),
        (["--before", "job-3"], [2, 1], ""),
        (
            ["--status", "pending", "--limit", "4"],
            [1, 2, 3, 4],
            "more: scheduler list --status pending --limit 4 --after job-4\n",
        ),
        (
            ["--node-id", "node-1", "--newest", "--limit", "1"],
            [5],
            "more: scheduler list --node-id node-1 --limit 1 --newest --before job-5\n",
        ),
        (["--status", "done"], [], ""),
        # A node's queue is listed whole, not as the agent's poll (its free capacity: one).
        (["--node-id", "node-1", "--status", "pending"], [1, 2, 3, 4, 5], ""),
    ],
)
def test_list_pages_and_says_how_to_get_the_next_page(
    lister: str, cli: Cli, argv: list[str], jobs: list[int], more: str
) -> None:
    code, out, err = cli(lister, "list", *argv)
    assert code == 0
    assert listed(out) == jobs
    assert err == more  # the "more" line is on stderr: stdout stays one line per job


def test_the_more_line_lists_the_next_page(lister: str, cli: Cli) -> None:
    seen: list[int] = []
    argv = ["list", "--newest", "--limit", "2"]
    while True:
        code, out, err = cli(lister, *argv)
        assert code == 0
        seen += listed(out)
        if not err:
            break
        argv = shlex.split(err.removeprefix("more: "))[1:]
    assert seen == [5, 4, 3, 2, 1]


def test_list_json_is_the_page_and_more_goes_to_stderr(lister: str, cli: Cli) -> None:
    code, out, err = cli(lister, "list", "--limit", "2", "--json")
    assert code == 0 and [job["job_id"] for job in json.loads(out)] == ["job-1", "job-2"]
    assert err == "more: scheduler list --limit 2 --after job-2\n"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--newest", "--after", "job-1"], 1, "error: --after pages oldest first"),
        (["--limit", "0"], 2, "--limit: must be at least 1"),
        (["--limit", "many"], 2, "--limit: 'many' is not a whole number"),
        (["--after", "5"], 1, "error: invalid after: use a job id"),
        (["--before", "x"], 1, "error: invalid before: use a job id"),
    ],
)
def test_list_refuses_bad_paging_clearly(
    lister: str,
    cli: Cli,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    if code == 2:  # argparse exits
        with pytest.raises(SystemExit) as exit_:
            cli(lister, "list", *argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
    else:
        got, out, err = cli(lister, "list", *argv)
        assert (got, out) == (code, "")
    assert message in err and "Traceback" not in err


def test_nodes_prints_a_table(api: str, cli: Cli) -> None:
    # A heartbeat now: the node is healthy however long this module has run.
    assert httpx.post(f"{api}/nodes/heartbeat", json={"id": "node-1"}).status_code == 200
    code, out, err = cli(api, "nodes")
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split() == [
        "ID", "ROLE", "STATUS", "CPUS", "MEMORY_MB", "LABELS", "LAST_HEARTBEAT"
    ]  # fmt: skip
    (row,) = [row for row in rows if row.startswith("node-1 ")]
    node_id, role, status, cpus, memory, labels, seen = row.split()
    # What it offers (the no_fit warning points here): registered with 1 cpu, no memory said.
    assert (node_id, role, status, cpus, memory, labels) == (
        "node-1", "compute", "healthy", "1", "-", "-"
    )  # fmt: skip
    assert seen == httpx.get(f"{api}/nodes").json()["node-1"]["last_seen"]
    code, out, _ = cli(api, "nodes", "--role", "storage")
    assert (code, out.splitlines()[1:]) == (0, [])
    code, out, _ = cli(api, "nodes", "--json")
    assert json.loads(out)["node-1"]["role"] == "compute"


def test_a_nodes_labels_are_compact_and_cut() -> None:
    assert listing.labels_cell({"zone": "b", "gpu": "a100"}) == "gpu=a100,zone=b"
    cut = listing.labels_cell({f"k{i}": "v" * 10 for i in range(9)})
    assert len(cut) == listing.LABELS_WIDTH and cut.endswith("...")


def test_a_submit_whose_answer_was_lost_is_sent_again_and_makes_one_job(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's submit (the client's) carries an Idempotency-Key: sent again after its
    answer was lost (the job was made), it gets that job back instead of making a second."""
    no_pauses(monkeypatch)
    wire = httpx.HTTPTransport()
    keys: list[str | None] = []

    class LosesTheFirstAnswer(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            response = wire.handle_request(request)
            keys.append(request.headers.get("idempotency-key"))
            if len(keys) == 1:
                response.close()
                raise httpx.ReadError("connection reset", request=request)
            return response

        def close(self) -> None:
            wire.close()

    before = len(httpx.get(f"{api}/jobs").json())

    def lossy(url: str, settings: Settings) -> Client:
        return Client(url or settings.scheduler_url, transport=LosesTheFirstAnswer())

    monkeypatch.setattr(cli_client, "connect", lossy)
    code, out, _ = cli(api, "submit", "echo once", "--idempotency-key", "cli-key-1", "--json")
    assert code == 0  # the replay: the job the lost answer carried
    assert keys == ["cli-key-1", "cli-key-1"]
    jobs = httpx.get(f"{api}/jobs").json()
    assert len(jobs) == before + 1 and jobs[-1]["job_id"] == json.loads(out)["job_id"]


def test_submit_sends_a_key_and_takes_one(api: str, cli: Cli) -> None:
    code, first, _ = cli(api, "submit", "echo keyed", "--idempotency-key", "cli-key-2")
    assert code == 0
    code, again, _ = cli(api, "submit", "echo keyed", "--idempotency-key", "cli-key-2")
    assert (code, again) == (0, first)
    code, _, err = cli(api, "submit", "echo other", "--idempotency-key", "cli-key-2")
    assert code == 1 and err.startswith("error: Idempotency-Key already used")
    _, one, _ = cli(api, "submit", "echo keyed")
    _, two, _ = cli(api, "submit", "echo keyed")
    assert one != two  # a new key each time by default: two submits, two jobs


def test_submit_takes_a_delay_and_a_retry_policy(api: str, cli: Cli) -> None:
    argv = ["submit", "echo later", "--delay", "3600", "--max-retries", "4"]
    code, out, _ = cli(api, *argv, "--retry-backoff", "30", "--json")
    job = json.loads(out)
    assert code == 0 and job["status"] == "delayed" and "run_at" in job
    assert (job["max_retries"], job["retry_backoff_secs"]) == (4, 30)
    code, out, _ = cli(api, "submit", "echo then", "--run-at", "2000-01-01T00:00:00Z")
    assert code == 0 and out.endswith("(status=pending)\n")  # a time past: due now
    code, _, err = cli(api, "submit", "x", "--run-at", "soon")
    assert code == 1 and "error: --run-at 'soon': use RFC 3339" in err


def test_lengths_of_time_are_typed_as_people_type_them(api: str, cli: Cli) -> None:
    """`--delay 1h` was `invalid float value: '1h'`: 1h30m, 5m, 90s are seconds too (a length
    the CLI cannot read: tests/cli/test_usage.py)."""
    argv = ["submit", "echo later", "--delay", "1h30m", "--retry-backoff", "5m", "--json"]
    code, out, _ = cli(api, *argv)
    job = json.loads(out)
    assert code == 0 and job["retry_backoff_secs"] == 300
    due = datetime.fromisoformat(job["run_at"]) - datetime.fromisoformat(job["created_at"])
    assert due.total_seconds() == pytest.approx(5400, abs=1)
    httpx.delete(f"{api}/jobs/{job['job_id']}")


def test_status_says_when_a_job_is_due_and_what_it_waits_for(api: str, cli: Cli) -> None:
    """A delayed job's run_at (to the second) and a waiting job's `after`, on the job's line
    when set: `status` left both out, so a job waiting for either looked stuck."""
    due = int(time.time()) + 86400
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(due))
    given = time.strftime("%Y-%m-%dT%H:%M:%S.25+01:00", time.gmtime(due + 3600))
    later = cli(api, "submit", "echo due", "--run-at", given)[1].split()[1]
    line = f'job_id={later} node_id=node-1 status=delayed run_at={at} command="echo due"\n'
    assert cli(api, "status", later) == (0, line, "")
    first = cli(api, "submit", "echo first")[1].split()[1]
    waiting = cli(api, "submit", "echo next", "--after", f"{first},{later}")[1].split()[1]
    after = f"after={first},{later}"
    line = f'job_id={waiting} node_id=node-1 status=waiting {after} command="echo next"\n'
    assert cli(api, "status", waiting) == (0, line, "")
    line = f'job_id={first} node_id=node-1 status=pending command="echo first"'
    code, out, _ = cli(api, "status", first)  # neither set: neither said
    assert code == 0 and out.splitlines()[0] == line and QUEUE_LINE.fullmatch(out.splitlines()[1])
    for job_id in (waiting, later, first):
        httpx.delete(f"{api}/jobs/{job_id}")


def test_status_says_run_at_only_while_the_job_is_delayed(api: str, cli: Cli) -> None:
    """A job a dependency released, or a retry by hand started again, keeps its run_at (the
    dashboard's wait counts from it): `status` said `run_at=` of a time it no longer waits
    for, as if it were delayed."""
    first = httpx.post(f"{api}/jobs", json={"command": "echo first"}).json()["job_id"]
    body = {"command": "echo next", "after": [first]}
    released = httpx.post(f"{api}/jobs", json=body).json()["job_id"]
    finish(api, first, "done", 0, "")
    failed = httpx.post(f"{api}/jobs", json={"command": "exit 3", "max_retries": 0}).json()
    finish(api, failed["job_id"], "failed", 3, "")
    assert cli(api, "retry", failed["job_id"])[0] == 0
    for job_id in (released, failed["job_id"]):
        job = httpx.get(f"{api}/jobs/{job_id}").json()
        assert job["status"] == "pending" and job["run_at"], job  # kept in the record
        code, out, _ = cli(api, "status", job_id)
        assert code == 0 and " status=pending " in out and "run_at=" not in out, out
    assert f" after={first} " in cli(api, "status", released)[1]  # what it ran after, still
    for job_id in (released, failed["job_id"]):
        httpx.delete(f"{api}/jobs/{job_id}")


def test_format_job_says_run_at_while_delayed() -> None:
    job = {"job_id": "job-1", "node_id": "n", "command": "x", "run_at": "2026-12-24T06:00:00Z"}
    delayed = format_job({**job, "status": "delayed"})
    assert (
        delayed == 'job_id=job-1 node_id=n status=delayed run_at=2026-12-24T06:00:00Z command="x"\n'
    )
    for status in ("pending", "running", "done"):
        assert "run_at" not in format_job({**job, "status": status})


def test_retry_starts_failed_jobs_over(api: str, cli: Cli) -> None:
    job = httpx.post(f"{api}/jobs", json={"command": "exit 3", "max_retries": 0}).json()
    finish(api, job["job_id"], "failed", 3, "")
    code, out, _ = cli(api, "retry", job["job_id"])
    assert (code, out) == (0, f"retried: {job['job_id']}\n")
    assert httpx.get(f"{api}/jobs/{job['job_id']}").json()["status"] == "pending"
    code, out, err = cli(api, "retry", job["job_id"], "job-999999")
    assert (code, out) == (1, "")
    assert err == (
        "error: job-999999: job not found\n"
        f"error: {job['job_id']} is pending, not failed: nothing to retry\n"
    )
    finish(api, job["job_id"], "failed", 3, "")
    code, out, _ = cli(api, "retry", "--failed", "--yes", "--json")
    assert code == 0 and job["job_id"] in json.loads(out)["retried"]
    failed = httpx.get(f"{api}/jobs", params={"status": "failed"}).json()
    assert {j["failure_reason"] for j in failed} <= {"cancelled"}  # the rest of the dead set


def test_submit_takes_a_priority(api: str, cli: Cli) -> None:
    code, out, _ = cli(api, "submit", "echo urgent", "--priority", "-7", "--json")
    assert code == 0 and json.loads(out)["priority"] == -7
    code, _, err = cli(api, "submit", "x", "--priority", "1001")
    rule = "--priority: must be an integer between -1000 and 1000"
    assert code == 1 and err == f"error: {rule} (400)\n"


def test_submit_takes_the_jobs_it_runs_after(api: str, cli: Cli) -> None:
    first = json.loads(cli(api, "submit", "echo one", "--json")[1])["job_id"]
    second = json.loads(cli(api, "submit", "echo two", "--json")[1])["job_id"]
    code, out, _ = cli(api, "submit", "echo three", "--after", f"{first},{second}", "--json")
    job = json.loads(out)
    assert code == 0 and job["after"] == [first, second] and job["status"] == "waiting"
    # Not a job id: refused as the options are read (tests/cli/test_usage.py), nothing sent.
    with pytest.raises(SystemExit) as refused:
        cli(api, "submit", "x", "--after", "nope")
    assert refused.value.code == 2
    for job_id in (first, second, job["job_id"]):
        httpx.delete(f"{api}/jobs/{job_id}")


def test_drain_and_undrain_print_what_moved(api: str, cli: Cli) -> None:
    register(api, "drain-a")
    pinned = ""
    try:
        made = [httpx.post(f"{api}/jobs", json={"command": "x"}).json() for _ in range(2)]
        on_a = sum(1 for job in made if job["node_id"] == "drain-a")  # the least loaded's
        pin = {"command": "x", "node_selector": {"node.id": "drain-a"}}  # fits drain-a only
        pinned = httpx.post(f"{api}/jobs", json=pin).json()["job_id"]
        code, out, _ = cli(api, "drain", "drain-a")
        assert code == 0
        assert out == (
            f"drained drain-a (by operator): {on_a} job(s) moved, 1 unplaced, 0 stayed\n"
            "the unplaced jobs wait for a node that fits them (scheduler status shows their "
            "pending_reason); they are placed as soon as one has room\n"
        )
        code, out, _ = cli(api, "nodes")
        assert code == 0 and "healthy (drained by operator)" in out
        code, out, _ = cli(api, "drain", "drain-a", "--json")
        assert code == 0 and json.loads(out)["moved"] == 0
        code, out, _ = cli(api, "undrain", "drain-a")
        assert (code, out) == (0, "undrained drain-a: it takes new jobs again\n")
        code, out, _ = cli(api, "undrain", "drain-a")
        assert (code, out) == (0, "drain-a was not drained\n")
        code, _, err = cli(api, "drain", "nobody")
        assert (code, err) == (1, "error: node not found (404)\n")
    finally:
        if pinned:
            assert httpx.delete(f"{api}/jobs/{pinned}").status_code == 200
        assert httpx.delete(f"{api}/nodes/drain-a").status_code == 204


def test_submit_says_what_a_job_needs_and_why_it_waits(api: str, cli: Cli) -> None:
    argv = ["--cpus", "2", "--memory-mb", "512", "--select", "zone=a,b", "--node", "cli-absent"]
    code, out, _ = cli(api, "submit", "make", *argv, "--json")
    job = json.loads(out)
    assert code == 0
    assert (job["cpus"], job["memory_mb"]) == (2, 512)
    assert job["node_selector"] == {"zone": ["a", "b"], "node.id": "cli-absent"}
    assert (job["node_id"], job["pending_reason"]) == ("", "no_fit")
    code, out, _ = cli(api, "status", job["job_id"])
    assert out.startswith(f"job_id={job['job_id']} node_id= status=pending pending_reason=no_fit")
    code, out, _ = cli(api, "submit", "make", "--node", "cli-absent")
    assert out.endswith("on no node yet (status=pending, pending_reason=no_fit)\n")
    code, _, err = cli(api, "submit", "make", "--select", "zone")
    assert code == 2 and "--select 'zone': use KEY=VALUE" in err
    for waiting in httpx.get(f"{api}/jobs", params={"status": "pending"}).json():
        if waiting["node_id"] == "":
            httpx.delete(f"{api}/jobs/{waiting['job_id']}")


def test_submit_warns_of_a_job_no_node_can_take(api: str, cli: Cli) -> None:
    """A job no node fits was accepted in silence: it is, with a warning on stderr saying why
    and what to check; stdout (what scripts read) and the exit status are as before."""
    code, out, err = cli(api, "submit", "make", "--cpus", "99", "--memory-mb", "64")
    job_id = out.split()[1]
    assert (code, out) == (
        0,
        f"submitted {job_id} on no node yet (status=pending, pending_reason=no_fit)\n",
    )
    assert err == (
        f"warning: {job_id} has no node to run on (no_fit): no live node offers 99 cpus and "
        "64 MB of memory; it waits until one does (`scheduler nodes` shows what each offers)\n"
    )
    code, out, err = cli(
        api, "submit", "make", "--node", "node-l", "--select", "zone=a,b", "--json"
    )
    job = json.loads(out)
    assert (code, job["pending_reason"]) == (0, "no_fit")
    assert err == (
        f"warning: {job['job_id']} has no node to run on (no_fit): no live node matches "
        "node.id=node-l zone=a,b; it waits until one does (`scheduler nodes` shows what each "
        "offers)\n"
    )
    for unplaced in (job_id, job["job_id"]):
        assert httpx.delete(f"{api}/jobs/{unplaced}").status_code == 200


@pytest.mark.parametrize("reason", sorted(PENDING_REASONS))
def test_each_pending_reason_is_warned_of_or_passes_by_itself(reason: str) -> None:
    """A reason added to the models is decided here: warned of at submit, or a queue's wait."""
    job = {"job_id": "job-1", "status": "pending", "pending_reason": reason, "cpus": 2}
    warned = unplaced_warning(job)
    assert (reason in HINTS) != (reason in WAITS_BY_ITSELF)  # one or the other
    assert bool(warned) == (reason in HINTS)
    assert not warned or (warned.startswith("warning: job-1 ") and f"({reason})" in warned)
    assert unplaced_warning({**job, "status": "running"}) == ""


def test_a_wrong_key_past_the_limit_is_told_as_a_wrong_key(
    redis_url: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past AUTH_FAILURES_MAX the scheduler answers a wrong key 429: waiting does not help, a
    right key is served at once (docs/SECURITY.md). The answer said "try again later" and the
    command-line client gave no hint, as if the operator's right key were locked out."""
    env = scheduler_env(
        redis_url,
        unique_prefix("client-limit"),
        TINYAWS_API_KEY=KEY,
        AUTH_FAILURES_MAX="1",
        AUTH_FAILURES_WINDOW_SECS="600",
    )
    with api_replicas(1, env) as (url,):
        monkeypatch.setenv("TINYAWS_API_KEY", "wrong")
        answers = [cli(url, "list") for _ in range(2)]
        monkeypatch.setenv("TINYAWS_API_KEY", KEY)
        served = cli(url, "list")
    (_, _, first), (code, out, err) = answers
    assert first.startswith("error: unauthorized")
    assert (code, out) == (1, "") and err.startswith("error: ")
    assert "try again later" not in err and "a right one is served" in err
    # The key's hint, then when the lockout ends: the window's time left, from Retry-After.
    hint, lockout = err.splitlines()[-2:]
    assert hint == (
        "hint: the scheduler refused TINYAWS_API_KEY: set it to the scheduler's key, or to a "
        "named key not revoked (an admin's `scheduler key list` shows them)"
    )
    said = re.fullmatch(
        r"hint: too many wrong keys from this address: try again in ([0-9]+) s \(a right key "
        r"is served now\)",
        lockout,
    )
    assert said and 0 < int(said[1]) <= 600, lockout
    assert served[0] == 0


@pytest.mark.parametrize(
    ("headers", "message", "key_refused"),
    [
        ({"Retry-After": "42"}, "unauthorized: too many wrong credentials", True),
        ({"Retry-After": "42"}, "worded otherwise by another version", True),
        ({}, "unauthorized: a 429 without Retry-After is no lockout", False),
        ({}, "over quota: namespace 'a' holds 1 pending jobs", False),
    ],
)
def test_the_lockout_is_told_by_its_retry_after_not_its_wording(
    headers: dict[str, str], message: str, key_refused: bool
) -> None:
    """The lockout's 429 has Retry-After, the quota's none: the CLI told them apart by a copy
    of the server's wording, and said nothing of when to try again."""
    error = refusals.said(api_error(429, message.encode(), httpx.Headers(headers)))
    assert (error.refused_key, error.locked_for) == (key_refused, 42 if key_refused else 0)
    out, err = io.StringIO(), io.StringIO()

    def refused(*_: object) -> int:
        raise error

    with Client("http://127.0.0.1:9") as client:
        assert cli_client.run(refused, argparse.Namespace(), client, out, err) == 1
    hint = (
        "hint: too many wrong keys from this address: try again in 42 s (a right key is served now)"
    )
    assert (hint in err.getvalue().splitlines()) == key_refused


def test_a_taken_job_says_whose_queue_it_left() -> None:
    job = {"job_id": "job-2", "node_id": "b", "status": "running", "taken_from": "a"}
    assert format_job(job) == 'job_id=job-2 node_id=b status=running taken_from=a command=""\n'
    assert progress(job) == "job-2 running on b (taken from a)\n"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("cancelled", "a cancelled job's status is failed (its failure_reason says cancelled)"),
        ("finished", "invalid choice: 'finished' (choose from pending, delayed,"),
    ],
)
def test_list_says_what_a_status_it_refuses_is(
    api: str, cli: Cli, capsys: pytest.CaptureFixture[str], status: str, message: str
) -> None:
    """The UI shows a cancelled job as such; `list --status cancelled` was `invalid choice`
    alone, though the job is there as failed."""
    with pytest.raises(SystemExit) as exit_:
        cli(api, "list", "--status", status)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err

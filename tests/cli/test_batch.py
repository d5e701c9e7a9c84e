"""`scheduler submit --from FILE` and `submit CMD --count N` (issue 40, item 2) against an API
served in this process: ids in order on stdout, each refusal with its line on stderr, the
exit status, batches of MAX_JOBS, replays under one --idempotency-key."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scheduler.cli import batch
from scheduler.cli import client as cli_client
from scheduler.client import Client
from scheduler.config import Settings
from tests.cli.conftest import Cli
from tests.conftest import Serve


@pytest.fixture
def api(serve: Serve) -> str:
    url = serve()
    body = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert httpx.post(f"{url}/nodes/register", json=body).status_code == 201
    return url


def jobs(url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = httpx.get(f"{url}/jobs").json()
    return found


def test_from_a_file_prints_each_id_and_each_error_with_its_line(
    api: str, cli: Cli, tmp_path: Path
) -> None:
    lines = [
        json.dumps({"command": "echo one"}),
        "",  # blank lines are skipped, and counted
        "{not json",
        json.dumps(["an", "array"]),
        json.dumps({"command": "x", "cpus": -1}),
        json.dumps({"command": "echo two", "priority": 9}),
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")

    code, out, err = cli(api, "submit", "--from", str(path), "--priority", "5", "--env", "A=1")

    assert code == 1
    assert out == "job-1\njob-2\n"
    assert err.splitlines() == [
        "line 3: not made: not JSON: Expecting property name enclosed in double quotes (column 2)",
        "line 4: not made: not a JSON object",
        "line 5: not made: invalid cpus -1: use 0 to 65536",  # the line's own field, as it is
        "made 2 of 5 jobs (line 1,6); 3 not made",
    ]
    made = jobs(api)
    assert [(j["command"], j["priority"], j["env_vars"]) for j in made] == [
        ("echo one", 5, {"A": "1"}),  # the options are each line's defaults
        ("echo two", 9, {"A": "1"}),  # a line's own field wins
    ]


def test_from_stdin_in_batches_replayed_under_one_key(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch, "MAX_JOBS", 2)
    sent: list[int] = []
    wire = httpx.HTTPTransport()

    class Counted(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/jobs/batch":
                sent.append(len(json.loads(request.read())["jobs"]))
            return wire.handle_request(request)

    def counting(url: str, settings: Settings) -> Client:
        return Client(url or settings.scheduler_url, transport=Counted())

    monkeypatch.setattr(cli_client, "connect", counting)
    text = "".join(json.dumps({"command": f"echo {i}"}) + "\n" for i in range(5))
    runs = []
    for _ in range(2):
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        runs.append(cli(api, "submit", "--from", "-", "--idempotency-key", "nightly-load"))
    assert runs[0] == (0, "".join(f"job-{n}\n" for n in range(1, 6)), "")
    assert runs[1] == runs[0]  # the same batches, the same jobs: none made twice
    assert sent == [2, 2, 1] * 2
    assert len(jobs(api)) == 5
    wire.close()


def test_an_array_gives_each_job_its_index_and_the_count(api: str, cli: Cli) -> None:
    code, out, err = cli(api, "submit", "echo $TASK_INDEX", "--count", "3", "--env", "B=2")
    assert (code, out, err) == (0, "job-1\njob-2\njob-3\n", "")
    made = jobs(api)
    assert [j["env_vars"] for j in made] == [
        {"B": "2", "TASK_INDEX": str(i), "TASK_COUNT": "3"} for i in range(3)
    ]
    assert {j["command"] for j in made} == {"echo $TASK_INDEX"}


def _agent_for(url: str, command: str, count: int) -> threading.Thread:
    """Play the agent of the `count` jobs running `command`: each claimed, then done, but the
    last task, failed with exit code 2 (polled until all are there: no wall clock)."""

    def run() -> None:
        for _ in range(6000):  # at most a minute: the submit takes milliseconds
            found = [j for j in jobs(url) if j["command"] == command and j["status"] == "pending"]
            if len(found) == count:
                break
            time.sleep(0.01)
        for job in found:
            last = job["env_vars"]["TASK_INDEX"] == str(count - 1)
            ending = {"status": "failed", "exit_code": 2} if last else {"status": "done"}
            for body in ({"status": "running"}, {"exit_code": 0, **ending}):
                assert httpx.patch(f"{url}/jobs/{job['job_id']}", json=body).status_code == 200

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_an_array_waited_for_says_each_end_and_sums_up(api: str, cli: Cli) -> None:
    """`--count N --wait` was refused; Slurm's users wait for an array: each job's end as
    a single wait says it, then the sum, exit 0 only when every one is done."""
    agent = _agent_for(api, "make part", 3)
    code, out, err = cli(api, "submit", "make part", "--count", "3", "--max-retries", "0", "--wait")
    agent.join()
    ids = out.split()
    assert code == 1 and len(ids) == 3
    assert err.splitlines() == [
        f"{ids[0]} done on n1 (exit_code=0)",
        f"{ids[1]} done on n1 (exit_code=0)",
        f"{ids[2]} failed on n1 (exit_code=2)",
        "ended: 2 done, 1 failed (task 2)",
    ]
    # --json: each end an entry on stdout, after the made ones.
    agent = _agent_for(api, "make all", 2)
    argv = ["submit", "make all", "--count", "2", "--max-retries", "0", "--wait", "--json"]
    code, out, err = cli(api, *argv)
    agent.join()
    entries = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and [e["task"] for e in entries] == [0, 1, 0, 1]
    assert [e.get("status") for e in entries[2:]] == ["done", "failed"]
    assert err == "ended: 1 done, 1 failed (task 1)\n"


def test_json_names_each_line(api: str, cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"command": "ok"}\n{"command": ""}\n')
    code, out, _ = cli(api, "submit", "--from", str(path), "--json")
    assert code == 1
    assert [json.loads(line) for line in out.splitlines()] == [
        {"line": 1, "job_id": "job-1"},
        {
            "line": 2,
            "error": "command or deploy_url is required",
            "status": 400,
            "field": "command",
        },
    ]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["submit", "x", "--from", "-"], "--from reads the jobs from FILE: no command"),
        (["submit", "--from", "-", "--count", "2"], "no command, no --count"),
        (["submit", "--count", "2"], "--count makes copies of a command: give one"),
        (["submit", "--priority", "3"], "required: command (or --from FILE)"),
    ],
)
def test_options_that_do_not_go_together_are_a_usage_error(
    api: str, cli: Cli, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as ended:
        cli(api, *argv)
    assert ended.value.code == 2  # as argparse's own
    err = capsys.readouterr().err
    assert err.startswith("usage: scheduler submit") and said in err, err
    assert jobs(api) == []


@pytest.mark.parametrize("text", ["", "\n  \n\t\n"])
def test_a_file_of_no_jobs_is_a_usage_error(
    api: str,
    cli: Cli,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    text: str,
) -> None:
    """A file with no job (empty, or blank lines only: the wrong path, a redirect gone wrong)
    ended in silence with exit 0, as if its jobs were sent."""
    path = tmp_path / "jobs.jsonl"
    path.write_text(text)
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    for name, said in ((str(path), str(path)), ("-", "- (stdin)")):
        with pytest.raises(SystemExit) as ended:
            cli(api, "submit", "--from", name)
        assert ended.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("usage: scheduler submit")
        assert captured.err.endswith(
            f"error: --from {said} holds no jobs: it takes a JSON job (the POST /jobs body) a "
            "line\n"
        )
    assert jobs(api) == []


def test_a_file_that_cannot_be_read_is_said(api: str, cli: Cli) -> None:
    code, out, err = cli(api, "submit", "--from", "/nonexistent/jobs")
    assert (code, out) == (1, "")
    assert "--from /nonexistent/jobs: No such file" in err
    assert jobs(api) == []


def test_a_batch_refused_whole_ends_the_run(api: str, cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"command": "a"}\n')
    assert cli(api, "submit", "--from", str(path), "--idempotency-key", "k")[0] == 0
    path.write_text('{"command": "b"}\n')
    code, out, err = cli(api, "submit", "--from", str(path), "--idempotency-key", "k")
    assert (code, out) == (1, "")
    assert "error: Idempotency-Key already used with another request" in err


def test_json_errors_name_the_files_line_and_the_column_alone(
    api: str, cli: Cli, tmp_path: Path
) -> None:
    """json's own `line 2 column 1` counted within the line (its newline ends line 1)."""
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"command": "a"}\n{"command": "b",\n')
    code, _, err = cli(api, "submit", "--from", str(path))
    assert code == 1 and err.splitlines()[0] == (
        "line 2: not made: not JSON: Expecting property name enclosed in double quotes "
        "(column 18)"  # where the line ends
    )


def test_a_partly_refused_array_says_each_not_made_and_sums_up(api: str, cli: Cli) -> None:
    """A quota's `nothing was made`, said of each task, read as if the array made none."""
    assert cli(api, "namespace", "quota", "team", "--pending", "2")[0] == 0
    code, out, err = cli(api, "submit", "true", "--count", "4", "--namespace", "team")
    assert (code, out) == (1, "job-1\njob-2\n")
    lines = err.splitlines()
    assert lines[0].startswith("task 2: not made: over quota: namespace 'team' holds 2 ")
    assert not any("nothing was made" in line for line in lines)
    assert lines[-1] == "made 2 of 4 jobs (task 0-1); 2 not made"


def test_an_options_field_is_said_as_the_option(api: str, cli: Cli, tmp_path: Path) -> None:
    code, _, err = cli(api, "submit", "x", "--count", "2", "--priority", "5000")
    assert code == 1 and err.splitlines() == [
        "task 0: not made: --priority: must be an integer between -1000 and 1000",
        "task 1: not made: --priority: must be an integer between -1000 and 1000",
        "made 0 of 2 jobs; 2 not made",
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"command": "a", "priority": 5000}\n{"command": "b"}\n')
    code, _, err = cli(api, "submit", "--from", str(path), "--cpus", "-1")
    assert code == 1 and err.splitlines()[:2] == [
        "line 1: not made: failed to decode job: priority: must be an integer between -1000 "
        "and 1000",  # the line's own field: as the line names it
        "line 2: not made: --cpus -1: use 0 to 65536",  # the option's
    ]


def test_an_array_over_the_cap_is_a_usage_error_and_makes_nothing(
    api: str,
    cli: Cli,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`--count 100000` made 100,000 jobs; Slurm's MaxArraySize caps an array."""
    with pytest.raises(SystemExit) as ended:
        cli(api, "submit", "true", "--count", str(cli_client.MAX_ARRAY_SIZE + 1))
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert f"argument --count: {cli_client.MAX_ARRAY_SIZE + 1} is too many: " in said
    assert f"the most jobs a submit makes is {cli_client.MAX_ARRAY_SIZE}: split the" in said
    monkeypatch.setattr(batch, "MAX_ARRAY_SIZE", 3)
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"command": "a"}\n' * 4)
    with pytest.raises(SystemExit) as ended:
        cli(api, "submit", "--from", str(path))
    assert ended.value.code == 2
    assert f"error: --from {path} holds over 3 jobs: the most jobs" in capsys.readouterr().err
    assert jobs(api) == []
    path.write_text('{"command": "a"}\n' * 3)
    assert cli(api, "submit", "--from", str(path))[0] == 0


@pytest.mark.parametrize("how", [["--count", "2", "x"], ["--from", "-"]])
def test_a_bad_idempotency_key_is_a_usage_error_before_any_batch(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch, how: list[str]
) -> None:
    """The scheduler refused it (400) at the first batch; a key that fits alone but not with
    what a run adds (`-9` a batch, `.999` a part of one) refused a later batch, half made."""
    monkeypatch.setattr("sys.stdin", io.StringIO('{"command": "a"}\n'))
    code, out, err = cli(api, "submit", *how, "--idempotency-key", "a b")
    assert (code, out) == (2, "")
    assert err == "error: --idempotency-key 'a b': use 1 to 249 visible ASCII characters\n"
    code, _, err = cli(api, "submit", *how, "--idempotency-key", "k" * 250)
    assert code == 2 and err.endswith(": use 1 to 249 visible ASCII characters\n"), err
    assert jobs(api) == []
    monkeypatch.setattr("sys.stdin", io.StringIO('{"command": "a"}\n'))
    assert cli(api, "submit", *how, "--idempotency-key", "k" * 249)[0] == 0


def test_a_bad_option_value_is_a_usage_error(api: str, cli: Cli) -> None:
    code, out, err = cli(api, "submit", "--count", "2", "--env", "NOEQ", "x")
    assert (code, out, err) == (2, "", "error: --env 'NOEQ': use NAME=VALUE\n")
    assert jobs(api) == []


def test_spans_are_runs_of_numbers() -> None:
    assert batch.spans([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert batch.summary([("line", 1)], 2) == "made 1 of 2 jobs (line 1); 1 not made\n"

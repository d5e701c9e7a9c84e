"""`scheduler serve`: --workers starts that many API processes on one port (default: one per
core), each serving the same Redis; SIGTERM stops them all."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import uvicorn

from scheduler.api.deadline import H11HeadDeadline, HeadDeadline
from scheduler.api.server import LaneProtocol, OneWriteProtocol
from scheduler.cli.main import (
    COMMAND_MODULES,
    GRACEFUL_SHUTDOWN_SECS,
    HTTP_PROTOCOLS,
    build_parser,
    default_workers,
    main,
    setup_logging,
)
from tests.processes import scheduler_env, stop, wait_http
from tests.redis_server import free_port


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_the_default_is_one_worker_per_core() -> None:
    assert default_workers() == len(os.sched_getaffinity(0))
    assert build_parser().parse_args(["serve"]).workers == default_workers()
    assert build_parser().parse_args(["serve", "--workers", "3"]).workers == 3


@pytest.mark.parametrize(
    ("choice", "protocol"),
    [
        ("lane", LaneProtocol),
        ("one-write", OneWriteProtocol),
        ("httptools", HeadDeadline),
        ("h11", H11HeadDeadline),
    ],
)
def test_serve_runs_the_hot_lane_unless_told_otherwise(choice: str, protocol: type) -> None:
    assert build_parser().parse_args(["serve"]).http == "lane"
    args = build_parser().parse_args(["serve", "--http", choice])
    config = uvicorn.Config("scheduler.api.app:create_app", http=HTTP_PROTOCOLS[args.http])
    config.load()  # as uvicorn does at start: the protocol class from its import string
    assert config.http_protocol_class is protocol


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([], "hot lane on: GET /jobs/{id}, the poll, POST /jobs and PATCH /jobs/{id}"),
        (["--access-log"], "hot lane off: --access-log (the lane writes no access lines);"),
        (["--http", "one-write"], "hot lane off: --http one-write;"),
        (["--http", "httptools"], "hot lane off: --http httptools;"),
        (["--http", "h11"], "hot lane off: --http h11;"),
    ],
)
def test_serve_says_at_start_which_path_serves_the_hot_calls(
    argv: list[str], line: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    with caplog.at_level(logging.INFO, logger="scheduler.api"):
        assert main(["serve", "--workers", "2", *argv]) == 0
    # (Without a key, a WARNING says so too: tests/cli/test_serve_checks.py.)
    said = [r.getMessage() for r in caplog.records if r.name == "scheduler.api" and r.levelno < 30]
    assert len(said) == 1 and said[0].startswith(line), said


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_a_bad_worker_count_is_refused(bad: str) -> None:
    cmd = [sys.executable, "-m", "scheduler", "serve", "--workers", bad]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "--workers" in result.stderr


def test_two_workers_serve_one_port_and_stop_together(redis_url: str, prefix: str) -> None:
    port = free_port()
    env = scheduler_env(redis_url, prefix)
    cmd = [sys.executable, "-m", "scheduler", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--workers", "2", "--log-level", "warning"], env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health")
        deadline = time.monotonic() + 120  # two Python processes starting on a loaded machine
        while time.monotonic() < deadline:
            servers = [c for c in children(proc.pid) if "spawn_main" in cmdline(c)]
            if len(servers) == 2:
                break
            time.sleep(0.1)
        assert len(servers) == 2, [cmdline(c) for c in children(proc.pid)]
        body = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
        # New connections land on either process; every one answers from the same Redis.
        assert httpx.post(f"{url}/nodes/register", json=body).status_code == 201
        ids = set()
        for _ in range(20):
            with httpx.Client(base_url=url) as http:
                created = http.post("/jobs", json={"command": "x"})
                assert created.status_code == 201, created.text
                ids.add(created.json()["job_id"])
                assert http.get(f"/jobs/{created.json()['job_id']}").status_code == 200
        assert len(ids) == 20
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        for server in servers:
            assert not Path(f"/proc/{server}").exists(), cmdline(server)
    finally:
        stop(proc)  # SIGTERM first: a killed supervisor would leave its workers running


def test_sigterm_answers_waiting_long_polls_at_once(redis_url: str, prefix: str) -> None:
    port = free_port()
    env = scheduler_env(redis_url, prefix)
    cmd = [sys.executable, "-m", "scheduler", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--workers", "1", "--log-level", "warning"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health")
        params = {"node_id": "n1", "status": "pending", "wait": "60"}
        with ThreadPoolExecutor(1) as pool:
            polling = pool.submit(httpx.get, f"{url}/jobs", params=params, timeout=90)
            time.sleep(0.5)  # the poll is waiting
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            # uvicorn re-raises the signal once it has shut down.
            assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
            assert time.monotonic() - began < GRACEFUL_SHUTDOWN_SECS + 10
            # The waiting poll was answered (no work), not cut.
            answer = polling.result(timeout=30)
            assert (answer.status_code, answer.json()) == (200, [])
    finally:
        stop(proc)  # SIGTERM first: a killed supervisor would leave its workers running


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    return {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }


def test_every_command_is_in_its_module_and_a_command_loads_only_its_own() -> None:
    assert _commands(build_parser()) == {"serve", "help", *COMMAND_MODULES}
    for command in COMMAND_MODULES:
        assert command in _commands(build_parser(command))
    code = (
        "import sys; from scheduler.cli.main import build_parser; build_parser('submit'); "
        "print(sorted(m for m in ('redis', 'scheduler.agent.executor') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_option_and_argument_has_help_text() -> None:
    missing = [
        f"{prog} {action.option_strings or action.dest}"
        for prog, parser in _parsers(build_parser())
        for action in parser._actions
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert missing == []
    commands = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert all(choice.help for choice in commands[0]._choices_actions)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "scheduler", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_help_prints_the_parsers_help() -> None:
    result = _run("help")
    assert result.returncode == 0 and result.stdout == _run("--help").stdout
    assert "nodes" in result.stdout and "help" in result.stdout
    result = _run("help", "list")
    assert result.returncode == 0 and result.stdout == _run("list", "--help").stdout
    assert "--newest" in result.stdout and "--before" in result.stdout
    result = _run("help", "bogus")
    assert (result.returncode, result.stdout) == (2, "")
    assert "no command 'bogus'" in result.stderr and "Traceback" not in result.stderr


def _paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every sub-command's words, `schedule add` included."""
    found = [path] if path else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _paths(sub, (*path, name))
    return found


@pytest.mark.parametrize("path", _paths(build_parser()), ids=" ".join)
def test_help_works_for_every_sub_command(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["help", *path]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: scheduler {' '.join(path)} ") and err == ""
    with pytest.raises(SystemExit):
        main([*path, "--help"])
    assert capsys.readouterr().out == out  # as COMMAND --help says it


def test_help_of_an_unknown_action_names_where_to_look(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", "schedule", "bogus"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("scheduler help: no command 'schedule bogus'; ")
    assert "`scheduler help schedule` lists them" in err


LOG_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+ \S"
)


def _log_lines(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no log lines"
    bad = [line for line in lines if not LOG_LINE.match(line)]
    assert bad == [], text
    return lines


def _loggers(lines: list[str]) -> set[str]:
    return {line.split()[3] for line in lines}


def _run_briefly(cmd: list[str], env: dict[str, str], until: str) -> str:
    """Run `cmd` until `until` is in its output (or 30 s), stop it, return its output."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None:
                log.seek(0)
                if until in log.read():
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.seek(0)
        return log.read()


def test_serve_worker_and_agent_log_in_one_format(redis_url: str, prefix: str) -> None:
    """timestamp, level, logger, message: uvicorn's lines (in each --workers process), rq's
    and the scheduler's own alike."""
    env = scheduler_env(redis_url, prefix)
    scheduler = [sys.executable, "-m", "scheduler"]
    port = str(free_port())
    serve = [*scheduler, "serve", "--host", "127.0.0.1", "--port", port, "--workers", "2"]
    lines = _log_lines(_run_briefly(serve, env, "Application startup complete"))
    assert "uvicorn.error" in _loggers(lines)
    assert sum("Started server process" in line for line in lines) >= 2

    worker = [*scheduler, "worker", "--burst", "--rq-log-level", "INFO"]
    lines = _log_lines(_run_briefly(worker, env, "this line never comes: burst mode exits"))
    assert {"rq.worker", "workers.worker"} <= _loggers(lines)

    env["SCHEDULER_URL"] = f"http://127.0.0.1:{free_port()}"  # nobody: it keeps trying
    agent = [*scheduler, "agent", "--node-id", "log-test"]
    lines = _log_lines(_run_briefly(agent, env, "failed"))
    assert "scheduler.agent" in _loggers(lines)


def test_setup_logging_leaves_a_configured_root_alone() -> None:
    """As basicConfig: a program (here pytest) that set up logging and calls main() keeps it."""
    root = logging.getLogger()
    before = list(root.handlers)
    assert before  # pytest's capture handlers
    setup_logging()
    assert root.handlers == before


def test_every_process_logs_httpx_warnings_not_each_request() -> None:
    """Issue 38: with REGISTRY_URL, every registry call was an httpx INFO line in serve's
    and the worker's logs (the CLI, the agent and up each silenced it themselves)."""
    code = (
        "import logging; from scheduler.cli.main import setup_logging; setup_logging(); "
        "logging.getLogger('httpx').info('HTTP Request: GET http://registry/nodes'); "
        "logging.getLogger('httpx').warning('a warning'); "
        "logging.getLogger('scheduler.api').info('ours')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "HTTP Request" not in done.stderr
    assert "WARNING httpx a warning" in done.stderr and "INFO scheduler.api ours" in done.stderr


def test_version_prints_the_installed_packages(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out == f"scheduler {metadata.version('tinyaws-scheduler')}\n"

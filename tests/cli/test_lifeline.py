"""Processes that end with their supervisor, kill -9 included (cli/lifeline.py): `scheduler
serve --workers N`'s API processes, and every process `scheduler up` starts (issue 25)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from scheduler.cli.lifeline import orphaned
from tests.cli.test_up import Up, _alive, _children, _cmdline
from tests.processes import scheduler_env, stop, wait_http
from tests.redis_server import free_port


def descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *descendants(child)]
    return found


def wait_gone(pids: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"still running {timeout} s after their supervisor died: {alive}"


def serve(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "scheduler", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(
        [*cmd, "--workers", "2", "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        stop(proc)


def open_long_poll(port: int) -> socket.socket:
    """A poll held open by the server (it waits up to 20 s for work): a request still running
    when the supervisor dies."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn.sendall(
        b"GET /jobs?node_id=n-held&status=pending&wait=20 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    return conn


def test_serve_killed_with_sigkill_takes_its_api_processes_and_the_port_is_free_at_once(
    redis_url: str, prefix: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    env = scheduler_env(redis_url, prefix)
    port = free_port()
    first = serve(env, port)
    procs.append(first)
    wait_http(f"http://127.0.0.1:{port}/health", timeout=60)
    workers = descendants(first.pid)
    assert len(workers) >= 2
    held = open_long_poll(port)
    try:
        first.kill()
        first.wait()
        # Before the fix the orphans listened on for good: a new serve could not bind (and
        # the orphans answered in its place). They go once their supervisor is gone (their
        # lifeline); a serve started before the last has gone may find the port still held
        # on a loaded machine (it exited 3 once in CI), so it starts once they have gone.
        wait_gone(workers)
        again = serve(env, port)
        procs.append(again)
        deadline = time.monotonic() + 60
        while len(descendants(again.pid)) < 2 and again.poll() is None:
            assert time.monotonic() < deadline, "the new serve started no API process"
            time.sleep(0.1)
        wait_http(f"http://127.0.0.1:{port}/health", timeout=60)
        assert again.poll() is None
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        held.close()


# In every API process of `serve` (multiprocessing's spawned children), SIGTERM blocked from
# the start: a process that never acts on it, whatever phase it is in (a start-up held open, a
# shutdown that never ends: a lifespan that lost its cancel waited for ever, tests/store/
# test_mux_cancel.py). Python runs sitecustomize at start-up, from PYTHONPATH.
DEAF_TO_SIGTERM = """
import signal, sys
if "--multiprocessing-fork" in sys.argv:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
"""


def deaf_api_processes(tmp_path: Path) -> str:
    """A PYTHONPATH under which serve's API processes block SIGTERM (DEAF_TO_SIGTERM)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DEAF_TO_SIGTERM)
    return os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))


def test_serve_killed_while_its_api_processes_do_not_stop_takes_them_still(
    redis_url: str, prefix: str, procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # Its death sends them SIGTERM, which they do not act on: each ends itself
    # ORPHAN_GRACE_SECS after (lifeline.end_within, started by serve_worker_app).
    env = scheduler_env(redis_url, prefix)
    env["PYTHONPATH"] = deaf_api_processes(tmp_path)
    port = free_port()
    first = serve(env, port)
    procs.append(first)
    wait_http(f"http://127.0.0.1:{port}/health", timeout=60)
    api = [p for p in descendants(first.pid) if b"--multiprocessing-fork" in _cmdline(p)]
    assert api and all(_blocks_sigterm(p) for p in api)
    stamps = {pid: _started_at(pid) for pid in api}
    try:
        first.kill()
        first.wait()
        wait_gone(api)
    finally:
        _kill_left(stamps)


@pytest.mark.parametrize("deaf", [False, True], ids=["api-stops", "api-deaf-to-sigterm"])
def test_up_killed_with_sigkill_takes_every_process_it_started(tmp_path: Path, deaf: bool) -> None:
    # Deaf: uvicorn's supervisor waits for its processes without end, so `serve`, its resource
    # tracker and API processes that never act on their SIGTERM outlived `up`. Once `up` is
    # gone, `serve` gives them ORPHAN_GRACE_SECS to stop, then kills them (lifeline.end_within).
    extra = {"PYTHONPATH": deaf_api_processes(tmp_path)} if deaf else {}
    up = Up(tmp_path / "data", tmp_path / "up.log", **extra)
    stamps: dict[int, str] = {}
    try:
        started = descendants(up.proc.pid)
        stamps = {pid: _started_at(pid) for pid in started}
        # redis, the API (its supervisor and a process per core), the worker, the agent
        assert len(started) >= 5, started
        if deaf:
            api = [p for p in started if b"--multiprocessing-fork" in _cmdline(p)]
            assert api and all(_blocks_sigterm(p) for p in api), started
        up.proc.kill()
        up.proc.wait()
        wait_gone(started)
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
            up.proc.wait()
        _kill_left(stamps)


def _kill_left(stamps: dict[int, str]) -> None:
    """On a failure, the processes left are not left running for ever: each of `stamps` (pid:
    _started_at) that is still the same process (not its pid used again) is killed."""
    for pid, since in stamps.items():
        if _started_at(pid) == since:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _started_at(pid: int) -> str:
    """When `pid` started (/proc's starttime), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return ""


def _blocks_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


@pytest.mark.parametrize(("parent", "expected"), [(0, False), (1 << 30, True)])
def test_an_api_process_whose_supervisor_is_gone_already_is_an_orphan(
    parent: int, expected: bool
) -> None:
    assert orphaned(parent) is expected


# A child of `up` whose `up` died before it asked for its parent-death signal: none comes.
SPAWN_WITH_CHILD_SETUP = """
import functools, os, subprocess, sys
from scheduler.cli.embedded import child_setup
parent = os.getpid() if sys.argv[1] == "self" else int(sys.argv[1])
setup = functools.partial(child_setup, parent)
ran = subprocess.run([sys.executable, "-c", "print('ran')"], preexec_fn=setup, capture_output=True)
print(ran.returncode, ran.stdout.decode().strip())
"""


# "gone": a parent pid that is not the child's, as once it was reparented.
@pytest.mark.parametrize(("parent", "outcome"), [("self", "0 ran"), (str(1 << 30), "1")])
def test_a_child_of_up_whose_up_died_before_its_set_up_does_not_run(
    parent: str, outcome: str
) -> None:
    cmd = [sys.executable, "-c", SPAWN_WITH_CHILD_SETUP, parent]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == outcome, done.stderr

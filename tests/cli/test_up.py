"""`scheduler up` as a new user runs it: embedded Redis, API, worker and agent from one
command; `scheduler submit 'echo hello' --wait` prints hello; Ctrl-C stops every process; the
data survives a restart."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from scheduler.cli.agent import default_node_id
from scheduler.cli.embedded import UpError
from scheduler.cli.supervisor import Supervisor, restart_delay
from scheduler.cli.up import _banner, _child_env, _wait_registered
from scheduler.config import Settings
from scheduler.snapshot import layout
from scheduler.store.keys import Keys
from tests.fakes import FakeRegistry, FakeService
from tests.redis_server import free_port

BANNER = "scheduler is up at "


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "REGISTRY_"))}
    env.pop("TINYAWS_API_KEY", None)
    env.update(AGENT_POLL_SECS="0.2", PYTHONUNBUFFERED="1", **extra)
    return env


def _up_command(port: int, data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scheduler",
        "up",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _wait_for(check: Callable[[], list[int]], timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Up:
    def __init__(self, data_dir: Path, log: Path, wait: bool = True, **env: str) -> None:
        self.port = free_port()
        self.log = log
        self.env = env
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                _up_command(self.port, data_dir),
                env=_env(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.url = self.wait_banner() if wait else ""

    def banner(self) -> str:
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith(BANNER):
                return line.removeprefix(BANNER).strip()
        return ""

    def wait_banner(self, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if url := self.banner():
                self.url = url
                return url
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.1)
        raise AssertionError(f"no banner within {timeout} s:\n{self.log.read_text()}")

    def cli(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scheduler", *argv],
            cwd=cwd,
            env=_env(SCHEDULER_URL=self.url, **self.env),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=90)


@pytest.fixture
def ups(tmp_path: Path) -> Iterator[list[Up]]:
    started: list[Up] = []
    yield started
    for up in started:
        if up.proc.poll() is None:
            up.proc.kill()
            up.proc.wait()


def test_up_runs_the_product_and_ctrl_c_stops_everything(tmp_path: Path, ups: list[Up]) -> None:
    data, state = tmp_path / "data", tmp_path / "state"
    up = Up(data, tmp_path / "up.log", XDG_STATE_HOME=str(state))
    ups.append(up)
    assert up.url == f"http://127.0.0.1:{up.port}"
    hint = f"  try: SCHEDULER_URL=http://127.0.0.1:{up.port} ./dev submit 'echo hello' --wait"
    _wait_for(lambda: [1] if hint in up.log.read_text() else [], timeout=5)  # unbuffered
    # A key of the session (issue 22): only this user's client finds it, in a private file.
    key_file = state / "tinyaws-scheduler" / f"127.0.0.1-{up.port}" / "api-key"
    assert f"  key: in {key_file} " in up.log.read_text()
    assert key_file.stat().st_mode & 0o777 == 0o600
    stranger = httpx.post(f"{up.url}/jobs", json={"command": "id"}, timeout=10)
    assert stranger.status_code == 401
    children = _children(up.proc.pid)
    assert len(children) == 4  # redis, api, worker, agent

    result = up.cli("submit", "echo hello", "--wait", "--poll-secs", "0.2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "hello"

    # Snapshot by hand, REDIS_URL unset: up's Redis, found by its data dir (the default
    # one, data, from where up runs; or --data-dir), never another (issue 38).
    for where, argv in ((tmp_path, ()), (None, ("--data-dir", str(data)))):
        snap = up.cli("snapshot", *argv, cwd=where)
        assert snap.returncode == 0, snap.stderr
        assert snap.stdout.startswith("snapshot: ")
        assert f"written to {data / 'scheduler.db'} (Redis unix://:***@" in snap.stdout
        assert snap.stdout.endswith(f" from {data / 'redis' / 'url'})\n")

    assert "Traceback" not in up.log.read_text()
    # A child that dies is restarted; the others keep running (issue #11, item 1). (A task
    # cut off by the Redis kill may log its traceback: only the shutdown is checked below.)
    (worker,) = [pid for pid in children if b"worker" in _cmdline(pid)]
    os.kill(worker, signal.SIGKILL)
    # The killed one may still be listed a moment after the signal: wait for another.
    restarted = _wait_for(
        lambda: [p for p in _children(up.proc.pid) if b"worker" in _cmdline(p) and p != worker]
    )
    assert restarted != [worker] and up.proc.poll() is None
    assert "worker exited with status -9: restarting it in 1 s" in up.log.read_text()
    # The embedded Redis too: same port, same append-only file; the others ride it out.
    (server,) = [pid for pid in _children(up.proc.pid) if b"valkey" in _cmdline(pid)]
    os.kill(server, signal.SIGKILL)
    back = _wait_for(
        lambda: [p for p in _children(up.proc.pid) if b"valkey" in _cmdline(p) and p != server]
    )
    assert back != [server] and up.proc.poll() is None
    assert "redis exited with status -9: restarting it in 1 s" in up.log.read_text()
    again = up.cli("submit", "echo again", "--wait", "--poll-secs", "0.2")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == "again"
    children = _children(up.proc.pid)
    assert len(children) == 4

    logged = len(up.log.read_bytes())
    assert up.interrupt() == 0, up.log.read_text()
    assert not [pid for pid in children if _alive(pid)]
    assert b"Traceback" not in up.log.read_bytes()[logged:]
    assert list((data / "redis").glob("appendonlydir/*.aof"))
    assert not key_file.exists()  # the session is over

    # The data folder keeps the jobs: a second `up` on it still knows job-1.
    again = Up(data, tmp_path / "up2.log", XDG_STATE_HOME=str(state))
    ups.append(again)
    status = again.cli("status", "job-1")
    assert status.stdout.splitlines()[:2] == [
        f'job_id=job-1 node_id={default_node_id()} status=done command="echo hello"',
        "exit_code=0",
    ]
    assert again.interrupt() == 0


def test_an_agent_beside_up_is_one_command_and_a_stop_says_what_it_waits_for(
    tmp_path: Path, ups: list[Up]
) -> None:
    """`scheduler agent --node-id NAME` beside `up` registers with up's session key (it looped
    `register ... 401`); Ctrl-C with a job running says which job and how long (it waited
    in silence)."""
    state = tmp_path / "state"
    up = Up(tmp_path / "data", tmp_path / "up.log", XDG_STATE_HOME=str(state), AGENT_GRACE_SECS="3")
    ups.append(up)
    key = (state / "tinyaws-scheduler" / f"127.0.0.1-{up.port}" / "api-key").read_text().strip()
    operator = {"Authorization": f"Bearer {key}"}
    env = _env(SCHEDULER_URL=up.url, XDG_STATE_HOME=str(state), AGENT_WORK_DIR=str(tmp_path))
    with (tmp_path / "agent.log").open("wb") as log:
        second = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "agent", "--node-id", "beside-1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def listed() -> list[int]:
            nodes = httpx.get(f"{up.url}/nodes", headers=operator, timeout=10).json()
            return [1] if nodes.get("beside-1", {}).get("status") == "healthy" else []

        _wait_for(listed, timeout=90)  # a process to start, beside a loaded machine's others
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=90) == 0, (tmp_path / "agent.log").read_text()
    # A refused call, as the agent logs it: a bare "401" also matches a log line's
    # milliseconds (",401"), up's random port or the tmp path.
    assert "HTTP 401" not in (tmp_path / "agent.log").read_text()

    job = {"command": "sleep 60", "node_selector": {"node.id": default_node_id()}}
    job_id = httpx.post(f"{up.url}/jobs", json=job, headers=operator, timeout=10).json()["job_id"]

    def running() -> list[int]:
        found = httpx.get(f"{up.url}/jobs/{job_id}", headers=operator, timeout=10).json()
        return [1] if found["status"] == "running" else []

    _wait_for(running, timeout=90)
    assert up.interrupt() == 0
    logged = up.log.read_text()
    assert f"waiting up to 3 s (AGENT_GRACE_SECS) for {job_id} to finish" in logged, logged
    assert "s more for the agent to stop: its running jobs get AGENT_GRACE_SECS" in logged


def test_up_with_an_external_registry_is_up_once_its_agent_is_listed_there(
    tmp_path: Path, ups: list[Up]
) -> None:
    """With REGISTRY_URL, `up` said it was up before its agent had registered there: a
    submission right after the banner got 503 `no healthy compute nodes`. The fake registry
    lists the agent's node only when the test says so. The API runs a process per core, each
    with its own cache of the registry's answer (kept 2 s here): every one must place."""
    with FakeRegistry() as registry:
        registry.listing = False
        env = {"REGISTRY_URL": registry.url, "REGISTRY_CACHE_SECS": "2"}
        up = Up(tmp_path / "data", tmp_path / "up.log", wait=False, **env)
        ups.append(up)
        node_id = default_node_id()
        _wait_for(lambda: [1] if node_id in registry.registered else [])
        assert up.proc.poll() is None, up.log.read_text()
        # Registered, not yet listed: no submission would be placed, so no banner.
        assert not up.banner(), up.log.read_text()
        registry.listing = True
        up.wait_banner()
        for _ in range(3):  # each a new connection, to any of the API's processes
            placed = up.cli("submit", "true")
            assert placed.returncode == 0, placed.stderr
        result = up.cli("submit", "echo hello", "--wait", "--poll-secs", "0.2")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[-1] == "hello"
        nodes = up.cli("nodes")
        assert nodes.returncode == 0, nodes.stderr
        assert nodes.stdout.splitlines()[1].split()[:3] == [node_id, "compute", "healthy"]
        assert up.interrupt() == 0, up.log.read_text()
        assert ("DELETE", f"/nodes/{node_id}") in registry.seen  # the agent left cleanly
    assert "Traceback" not in up.log.read_text()


class FakeApi(FakeService):
    """An API whose GET /nodes?role=compute gives this answer."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__()
        self.answer = status, body

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        return self.answer if path == "/nodes?role=compute" else (404, b"404 page not found\n")


@pytest.mark.parametrize(
    ("status", "body", "registry_url", "said"),
    [
        (
            503,
            b"cannot list the nodes of the registry at REGISTRY_URL: registry answered 401\n",
            "http://registry.invalid",
            " at the registry (REGISTRY_URL) within 0.5 s (GET /nodes?role=compute: 503 "
            "cannot list the nodes of the registry at REGISTRY_URL: registry answered 401)",
        ),
        (
            200,
            b'{"n1":{"id":"n1","status":"unhealthy"}}',
            "",
            " within 0.5 s (GET /nodes?role=compute: node n1 unhealthy)",
        ),
        (200, b"{}", "", " within 0.5 s (GET /nodes?role=compute: node n1 not listed)"),
    ],
)
def test_an_agent_that_never_shows_up_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, status: int, body: bytes, registry_url: str, said: str
) -> None:
    monkeypatch.setenv("REGISTRY_URL", registry_url)
    monkeypatch.delenv("TINYAWS_API_KEY", raising=False)
    sup = Supervisor(_env())
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # waiting
    try:
        with FakeApi(status, body) as api, pytest.raises(UpError) as raised:
            _wait_registered(api.url, "n1", agent, sup, timeout=0.5)
    finally:
        agent.kill()
        agent.wait()
    assert str(raised.value) == "the agent did not register node n1" + said


def test_with_a_registry_up_waits_out_the_api_processes_caches() -> None:
    """Listed healthy by one API process, the node may be missing from another's cached
    answer: `up` waits REGISTRY_CACHE_SECS more (a lower bound: a slow machine only waits
    longer)."""
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with FakeApi(200, b'{"n1":{"id":"n1","status":"healthy"}}') as api:
            started = time.monotonic()
            _wait_registered(api.url, "n1", agent, Supervisor(_env()), cache_secs=1.0)
            assert time.monotonic() - started >= 1.0
    finally:
        agent.kill()
        agent.wait()


def test_up_refuses_a_port_in_use(tmp_path: Path, ups: list[Up]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            _up_command(port, tmp_path / "d"),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"port {port} is in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_up_refuses_shards_clearly(tmp_path: Path) -> None:
    env = {**_env(), "SCHEDULER_SHARDS": "3"}
    result = subprocess.run(
        _up_command(free_port(), tmp_path / "d"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "SCHEDULER_SHARDS=3: `up` runs one shard" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()  # refused before it made or started anything


def test_up_runs_its_agents_with_node_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_AUTH", raising=False)
    monkeypatch.delenv("REGISTRY_URL", raising=False)
    env = _child_env("redis://127.0.0.1:1/0", "http://127.0.0.1:9001", tmp_path)
    assert env["AGENT_AUTH"] == "token"
    monkeypatch.setenv("AGENT_AUTH", "open")  # an operator's own choice stands
    assert _child_env("redis://x", "http://y", tmp_path)["AGENT_AUTH"] == "open"


def test_up_runs_as_many_jobs_at_once_as_the_machine_has_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer's second job waited behind a `sleep 60` on a 2-core machine: `serve`'s
    default (the original's 1) is not `up`'s."""
    monkeypatch.delenv("MAX_JOBS_PER_NODE", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    env = _child_env("redis://127.0.0.1:1/0", "http://127.0.0.1:9001", tmp_path)
    assert env["MAX_JOBS_PER_NODE"] == "6"
    assert Settings.from_env(env).max_jobs_per_node == 6  # the API's and the agent's
    monkeypatch.setenv("MAX_JOBS_PER_NODE", "1")  # an operator's own choice stands
    assert _child_env("redis://x", "http://y", tmp_path)["MAX_JOBS_PER_NODE"] == "1"


def test_restart_backoff_doubles_to_a_cap() -> None:
    assert [restart_delay(n) for n in (1, 2, 3, 6, 7, 20)] == [1, 2, 4, 30, 30, 30]


def test_a_dead_child_is_restarted_after_its_backoff() -> None:
    sup = Supervisor(_env())
    first = sup.start("broken", "no-such-command")  # argparse exits 2 at once
    first.wait(timeout=30)
    t0 = time.monotonic()
    sup.check(t0)
    assert sup.children["broken"] is first  # not yet: 1 s first
    sup.check(t0 + 0.9)
    assert sup.children["broken"] is first
    sup.check(t0 + 1.0)
    second = sup.children["broken"]
    assert second is not first
    second.wait(timeout=30)
    t1 = time.monotonic()
    sup.check(t1)
    sup.check(t1 + 1.5)
    assert sup.children["broken"] is second  # a second quick death waits 2 s
    sup.check(t1 + 2.0)
    assert sup.children["broken"] is not second
    sup.children["broken"].wait(timeout=30)


@pytest.mark.parametrize(
    ("api_url", "try_line"),
    [
        ("http://127.0.0.1:9001", "  try: ./dev submit 'echo hello' --wait"),
        ("http://127.0.0.1:9100", "  try: SCHEDULER_URL=http://127.0.0.1:9100 ./dev submit"),
        ("http://10.0.0.5:9001", "  try: SCHEDULER_URL=http://10.0.0.5:9001 ./dev submit"),
    ],
)
def test_the_banner_hints_use_the_api_url(api_url: str, try_line: str) -> None:
    """`up --port N` (or --host): every hint points at that URL, so it works as printed."""
    out = io.StringIO()
    _banner(out, api_url, ["  redis: embedded"], Path("/k/api-key"))
    lines = out.getvalue().splitlines()
    assert lines[:2] == [f"scheduler is up at {api_url}", "  redis: embedded"]
    assert f"  ui: {api_url}/ui" in lines
    assert "  key: in /k/api-key (the UI's login; the CLI reads it there)" in lines
    agent_line = try_line.replace("try:", "another agent:").replace(" submit", " agent")
    assert any(line.startswith(agent_line.split("'")[0]) for line in lines), lines
    assert lines[-1].startswith(try_line)


def test_the_client_takes_a_session_key_only_for_its_address_from_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.client import session

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    key, path = session.create("http://127.0.0.1:9001")
    assert path == tmp_path / "tinyaws-scheduler" / "127.0.0.1-9001" / "api-key"
    for url in ("http://127.0.0.1:9001", "http://127.0.0.1:9001/"):
        assert session.with_session_key(Settings(), url).api_key == key, url
    # Only the address `up` gave: [::1]:9001 is another socket, which another local user
    # may hold (and localhost may resolve to it).
    others = ("http://[::1]:9001", "http://localhost:9001", "http://127.0.0.1:9002")
    for url in (*others, "http://127.evil.example:9001", "http://10.0.0.5:9001"):
        assert session.with_session_key(Settings(), url).api_key == "", url
    own = Settings(api_key="mine")  # TINYAWS_API_KEY wins
    assert session.with_session_key(own, "http://127.0.0.1:9001").api_key == "mine"
    path.chmod(0o644)  # readable by others: not trusted
    assert session.with_session_key(Settings(), "http://127.0.0.1:9001").api_key == ""
    session.remove(path)
    assert not path.exists()


def test_up_refuses_an_external_deployment_of_another_shard_count(
    tmp_path: Path, redis_url: str, prefix: str, rclient: redis.Redis
) -> None:
    """As serve and worker refuse it: exit 2, before it makes or starts anything (it said
    "the API exited with status 2 while starting" and exited 1)."""
    rclient.hset(Keys(prefix).shards, "count", "3")  # as a 3-shard deployment's start records
    result = subprocess.run(
        _up_command(free_port(), tmp_path / "d"),
        env=_env(REDIS_URL=redis_url, REDIS_PREFIX=prefix),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "SCHEDULER_SHARDS is 1, but this deployment was started with 3" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()
    assert list(rclient.scan_iter(Keys(prefix).pattern())) == [Keys(prefix).shards.encode()]


def test_up_refuses_a_snapshot_file_that_is_not_sqlite_when_redis_lost_its_data(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    """The shard count is looked for in the file then: up says it cannot be read, before it
    makes or starts anything (sqlite3's traceback, or its API dying at the restore)."""
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database, " * 64)
    result = subprocess.run(
        _up_command(free_port(), tmp_path / "d"),
        env=_env(REDIS_URL=redis_url, REDIS_PREFIX=prefix, SCHEDULER_DB=str(bad)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert f"{bad}: not a SQLite snapshot" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()


def _shard_zero_file(path: Path, count: int) -> None:
    """A snapshot file holding a sharded deployment's layout (shard 0's), of `count` shards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(layout.CREATE_TABLE)
        conn.execute("INSERT INTO shards (field, value) VALUES ('count', ?)", (str(count),))


def test_up_checks_the_shard_count_in_its_own_snapshot_file(
    tmp_path: Path, redis_url: str, prefix: str, rclient: redis.Redis
) -> None:
    """Its children snapshot to <data-dir>/scheduler.db: that file is the one looked for a
    count in (a Redis that lost its data), not a scheduler.db in the working directory
    (a stray one of 3 shards refused a fresh deployment, and the data dir's was never read)."""
    _shard_zero_file(tmp_path / "cwd" / "scheduler.db", 3)
    _shard_zero_file(tmp_path / "d" / "scheduler.db", 2)
    env = _env(REDIS_URL=redis_url, REDIS_PREFIX=prefix)
    env.pop("SCHEDULER_DB", None)
    result = subprocess.run(
        _up_command(free_port(), tmp_path / "d"),
        env=env,
        cwd=tmp_path / "cwd",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "SCHEDULER_SHARDS is 1, but this deployment was started with 2" in result.stderr
    assert list(rclient.scan_iter(Keys(prefix).pattern())) == []

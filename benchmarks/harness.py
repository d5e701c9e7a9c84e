"""What the benchmarks start and stop: a private Redis (one server, a cluster, or a server under
callgrind), the scheduler's processes (`scheduler serve`, an agent, an ASGI app under
uvicorn), another version's code (--against REF) and a child process running a benchmark's
measuring half on that code. The only module of benchmarks/ that starts a Redis
(tests/test_benchmarks.py checks it); the servers themselves are the test suite's
(tests/redis_server.py, tests/redis_cluster.py), so a benchmark's Redis starts as a test's.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import redis

# Re-exported (`as`): the benchmarks start their servers through this module only.
from tests.processes import scheduler_env as scheduler_env
from tests.processes import stop, wait_http
from tests.redis_cluster import Cluster as Cluster
from tests.redis_cluster import redis_cluster as redis_cluster
from tests.redis_server import free_port as free_port
from tests.redis_server import redis_server as redis_server

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
# A server's start: `scheduler serve` forks one process per core, each importing the app, on a
# machine the benchmark keeps busy (seconds each).
START_SECS = 60.0
Output = int | IO[Any] | None  # where a process's stdout or stderr goes, as subprocess takes it


@contextlib.contextmanager
def connected(url: str, **options: object) -> Iterator[redis.Redis]:
    """A client of the Redis at `url`, closed at the end."""
    client = redis.Redis.from_url(url, **options)  # type: ignore[arg-type]
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def callgrind_redis(workdir: str) -> Iterator[tuple[redis.Redis, int]]:
    """A redis-server under `valgrind --tool=callgrind` (its dumps in `workdir`), a client of it
    and its pid (for callgrind_control). No readiness probe of the suite's: under callgrind
    Redis takes seconds to answer its first PING."""
    port = free_port()
    server = subprocess.Popen(
        [
            *("valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir}/cg.%p"),
            *("redis-server", "--port", str(port), "--bind", LOOPBACK),
            *("--save", "", "--appendonly", "no", "--dir", workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host=LOOPBACK, port=port)
    try:
        for _ in range(600):
            if server.poll() is not None:
                raise RuntimeError(f"redis-server under callgrind exited ({server.returncode})")
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                break
            time.sleep(0.1)
        yield client, server.pid
    finally:
        client.close()
        server.terminate()
        server.wait()


def callgrind_dump(pid: int, workdir: str) -> str:
    """Dump the counters of callgrind_redis's server `pid`: the dump's path."""
    control = ["callgrind_control", "-d", str(pid)]
    before = set(glob.glob(f"{workdir}/cg.*"))
    subprocess.run(control, check=True, capture_output=True, timeout=60)
    for _ in range(100):
        dumped = sorted(set(glob.glob(f"{workdir}/cg.*")) - before)
        if dumped:
            return dumped[-1]
        time.sleep(0.1)
    raise RuntimeError("callgrind wrote no dump")


def callgrind_total(pid: int, workdir: str) -> int:
    """Dump the counters of callgrind_redis's server `pid` and read their total."""
    with open(callgrind_dump(pid, workdir)) as dump:
        for line in dump:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError("callgrind wrote no total")


def callgrind_zero(pid: int) -> None:
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)


def scheduler_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "scheduler", *args]


def uvicorn_cmd(app: str, port: int, *extra: str) -> list[str]:
    """uvicorn serving `app` (an import path) on loopback `port`, quiet as `scheduler serve`."""
    cmd = [sys.executable, "-m", "uvicorn", app, "--host", LOOPBACK, "--port", str(port)]
    return [*cmd, "--log-level", "warning", "--no-access-log", *extra]


@contextlib.contextmanager
def running(
    cmd: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: Path = ROOT,
    stop_secs: float = 10.0,
    stdout: Output = subprocess.DEVNULL,
    stderr: Output = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """`cmd` as a process, stopped at the end (SIGTERM, killed after `stop_secs`)."""
    proc = subprocess.Popen(
        list(cmd), env=None if env is None else dict(env), cwd=cwd, stdout=stdout, stderr=stderr
    )
    try:
        yield proc
    finally:
        stop(proc, timeout=stop_secs)


@dataclass(frozen=True)
class Served:
    """A process serving HTTP, and its base URL."""

    proc: subprocess.Popen[bytes]
    url: str

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextlib.contextmanager
def served(
    cmd: Sequence[str],
    port: int,
    env: Mapping[str, str] | None = None,
    *,
    cwd: Path = ROOT,
    stop_secs: float = 10.0,
    stdout: Output = subprocess.DEVNULL,
    stderr: Output = None,
) -> Iterator[Served]:
    """`cmd`, a server on loopback `port`, once it answers GET /health; stopped at the end."""
    url = f"http://{LOOPBACK}:{port}"
    with running(cmd, env, cwd=cwd, stop_secs=stop_secs, stdout=stdout, stderr=stderr) as proc:
        wait_http(f"{url}/health", timeout=START_SECS, proc=proc)
        yield Served(proc, url)


@contextlib.contextmanager
def scheduler_api(
    redis_url: str,
    prefix: str,
    *serve_args: str,
    code: Path = ROOT,
    workers: int | None = 1,
    stdout: Output = subprocess.DEVNULL,
    stderr: Output = None,
    **env: str,
) -> Iterator[Served]:
    """`scheduler serve` (`workers` processes, None: serve's default; `serve_args` added) of
    the checkout at `code` under `prefix` of the Redis at `redis_url`, `env` added to the
    suite's environment of a scheduler process (tests/processes.py scheduler_env)."""
    port = free_port()
    environ = scheduler_env(redis_url, prefix, PYTHONPATH=str(code), **env)
    cmd = scheduler_cmd("serve", "--host", LOOPBACK, "--port", str(port))
    cmd += ["--workers", str(workers)] if workers else []
    cmd += ["--log-level", "warning", *serve_args]
    with served(cmd, port, environ, cwd=code, stdout=stdout, stderr=stderr) as api:
        yield api


@contextlib.contextmanager
def uvicorn_api(
    redis_url: str,
    prefix: str,
    *uvicorn_args: str,
    code: Path = ROOT,
    stderr: Output = None,
    **env: str,
) -> Iterator[Served]:
    """The API's app (create_app) of the checkout at `code` under plain uvicorn, as
    scheduler_api otherwise: for what must not depend on `scheduler serve`'s own server."""
    port = free_port()
    environ = scheduler_env(redis_url, prefix, PYTHONPATH=str(code), **env)
    cmd = uvicorn_cmd("scheduler.api.app:create_app", port, "--factory", *uvicorn_args)
    with served(cmd, port, environ, cwd=code, stderr=stderr) as api:
        yield api


@contextlib.contextmanager
def agent(env: Mapping[str, str], node: str) -> Iterator[subprocess.Popen[bytes]]:
    """The reference agent as node `node`, its log left out; given the time to end its jobs
    when stopped."""
    cmd = scheduler_cmd("agent", "--node-id", node)
    with running(cmd, env, stop_secs=40.0, stderr=subprocess.DEVNULL) as proc:
        yield proc


# A checkout holds the version's product only: its benchmarks/ would shadow this one's (a
# measuring child runs this version's benchmark on that version's code) and its tests/ the
# harness's servers.
NOT_CHECKED_OUT = ("benchmarks/", "tests/")


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """The tree of git commit `ref` of this repository, but for NOT_CHECKED_OUT, in a
    temporary directory removed at the end."""
    archive = subprocess.run(
        ["git", "archive", ref], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="bench-checkout-") as tree:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            kept = [m for m in tar.getmembers() if not m.name.startswith(NOT_CHECKED_OUT)]
            tar.extractall(tree, members=kept, filter="data")
        yield Path(tree)


def child(code: Path, *args: str) -> str:
    """`python -P args` with the checkout at `code` first on its path and this one's
    benchmarks after it (-P: not the working directory, which is `code`); its output. Fails
    with the child's errors."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-P", *args], env=env, cwd=code, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} on {code} failed:\n{done.stderr}")
    return done.stdout


def run_module(module: str, *argv: str, code: Path = ROOT) -> str:
    """`python -m benchmarks.<module> argv` as a child on the checkout at `code`."""
    return child(code, "-m", f"benchmarks.{module}", *argv)


def poll_call(job_scripts: Any, node: str, limit: int = 1, caller: str = "open") -> Any:
    """The POLL call of the checkout's scripts module, as the original agent polls: a Poller
    with work stealing on since issue 40, the node, limit and caller before."""
    poller = getattr(job_scripts, "Poller", None)
    if poller is None:
        return job_scripts.poll(node, limit, caller)
    return job_scripts.poll(poller(node, caller), limit, True)

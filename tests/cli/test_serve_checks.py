"""`scheduler serve`'s checks at start (issue 36, Must have 6; docs/SECURITY.md): without a key
it says that every local user can submit commands; with one, open agent calls beyond loopback
to any network are refused (exit 2, naming what to set) unless a setting whose name says it
is insecure allows them. Before, anyone who reached the port registered a node and received
every new job with its env_vars."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from scheduler.cli.serve_checks import Exposure, refusal, warnings
from scheduler.config import Settings
from tests.processes import PortTaken, wait_http
from tests.redis_server import free_port

KEY = secrets.token_urlsafe(32)


def exposure(host: str, no_key: bool = False, open_agents: bool = False, **env: str) -> Exposure:
    return Exposure.of(host, Settings.from_env(env), no_key, open_agents)


@pytest.mark.parametrize(
    ("host", "env", "flags", "refused"),
    [
        ("127.0.0.1", {}, {}, ""),
        ("::1", {"TINYAWS_API_KEY": KEY}, {}, ""),
        ("0.0.0.0", {}, {}, "without TINYAWS_API_KEY"),
        ("0.0.0.0", {}, {"no_key": True}, ""),  # no key: everything is open, said once
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY}, {}, "AGENT_AUTH=open"),
        ("10.1.2.3", {"TINYAWS_API_KEY": KEY}, {}, "AGENT_AUTH=open"),
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY}, {"open_agents": True}, ""),
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY, "SERVE_INSECURE_OPEN_AGENTS": "1"}, {}, ""),
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY, "AGENT_NETWORKS": "10.0.0.0/8"}, {}, ""),
        # A /0 lets every caller in: no narrowing, whatever else the list holds.
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY, "AGENT_NETWORKS": "0.0.0.0/0"}, {}, "AGENT_AUTH=open"),
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY, "AGENT_NETWORKS": "10.0.0.0/8,::/0"}, {}, "open"),
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY, "AGENT_NETWORKS": "::ffff:0:0/96"}, {}, "open"),
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY, "AGENT_AUTH": "token"}, {}, ""),
        ("0.0.0.0", {"TINYAWS_API_KEY": KEY, "SERVE_INSECURE_OPEN_AGENTS": "2"}, {}, "not 0 or 1"),
    ],
)
def test_who_may_start_where(
    host: str, env: dict[str, str], flags: dict[str, bool], refused: str
) -> None:
    said = refusal(exposure(host, **flags, **env))
    assert (refused in said) if refused else said == ""


def test_the_refusal_names_every_way_out() -> None:
    said = refusal(exposure("0.0.0.0", TINYAWS_API_KEY=KEY))
    for way in ("AGENT_AUTH=token", "AGENT_NETWORKS", "--insecure-open-agents"):
        assert way in said
    assert "SERVE_INSECURE_OPEN_AGENTS=1" in said


def test_what_serve_says_at_start() -> None:
    (local,) = warnings(exposure("127.0.0.1"))
    assert "every local user can submit commands" in local and "TINYAWS_API_KEY=" in local
    (anyone,) = warnings(exposure("0.0.0.0", no_key=True))
    assert "without a key (--insecure-no-key): anyone who reaches it" in anyone
    (agents,) = warnings(exposure("0.0.0.0", open_agents=True, TINYAWS_API_KEY=KEY))
    assert "--insecure-open-agents" in agents
    assert warnings(exposure("0.0.0.0", TINYAWS_API_KEY=KEY, AGENT_AUTH="token")) == []
    assert warnings(exposure("127.0.0.1", TINYAWS_API_KEY=KEY)) == []


# The real `scheduler serve`.


def serve(redis_url: str, prefix: str, *args: str, **env: str) -> subprocess.Popen[str]:
    keep = ("PATH", "HOME", "LANG", "PYTHONPATH")
    environ = {k: v for k, v in os.environ.items() if k in keep}
    environ.update(REDIS_URL=redis_url, REDIS_PREFIX=prefix, SCHEDULER_DB=":memory:", **env)
    argv = [sys.executable, "-m", "scheduler", "serve", "--workers", "1", *args]
    return subprocess.Popen(argv, env=environ, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=30)


def serve_up(
    redis_url: str,
    prefix: str,
    started: list[subprocess.Popen[str]],
    *args: str,
    **env: str,
) -> tuple[subprocess.Popen[str], str]:
    """`serve` with `args` on a free port, once it answers: (the process, its URL). A free
    port is only free when drawn: another test's server may take it first (serve then exits
    3, `address already in use`), and it starts again on another."""
    for _ in range(3):
        port = free_port()
        proc = serve(redis_url, prefix, *args, "--port", str(port), **env)
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        try:
            # Until this serve is the one listening there (not another test's server).
            wait_http(f"{url}/health", timeout=60, proc=proc)
            return proc, url
        except PortTaken:
            said = proc.communicate()[1]
            assert "address already in use" in said, said
    raise AssertionError("three free ports were taken before serve could bind one")


def stopped(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    return proc.communicate(timeout=30)[1]


def test_serve_without_a_key_says_every_local_user_can_submit(
    redis_url: str, prefix: str, started: list[subprocess.Popen[str]]
) -> None:
    proc, _ = serve_up(redis_url, prefix, started)
    stderr = stopped(proc)
    assert "WARNING" in stderr and "every local user can submit commands" in stderr


def test_open_agent_calls_on_every_interface_are_refused_at_start(
    redis_url: str, prefix: str, started: list[subprocess.Popen[str]]
) -> None:
    """The attack: with the key set and AGENT_AUTH=open on 0.0.0.0, a stranger registered a
    node and took every new job, env_vars and all. Now serve does not start."""
    port = free_port()
    proc = serve(redis_url, prefix, "--host", "0.0.0.0", "--port", str(port), TINYAWS_API_KEY=KEY)
    started.append(proc)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert stderr.startswith("scheduler serve: refusing to serve the agent calls open")
    assert "Traceback" not in stderr


def test_agent_networks_let_open_mode_serve_and_keep_strangers_out(
    redis_url: str, prefix: str, started: list[subprocess.Popen[str]]
) -> None:
    """The Rust agent's way (docs/OPERATIONS.md): open mode beyond loopback for the agents'
    network only; a stranger elsewhere (here: this host, outside 10.0.0.0/8) registers no
    node."""
    env = {"TINYAWS_API_KEY": KEY, "AGENT_NETWORKS": "10.0.0.0/8"}
    proc, url = serve_up(redis_url, prefix, started, "--host", "0.0.0.0", **env)
    node = {"id": "stranger", "hostname": "stranger", "cpu_count": 2, "role": "compute"}
    assert httpx.post(f"{url}/nodes/register", json=node).status_code == 403
    assert "--insecure-open-agents" not in stopped(proc)


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--insecure-open-agents"], {}), ([], {"SERVE_INSECURE_OPEN_AGENTS": "1"})],
    ids=["flag", "setting"],
)
def test_open_agent_calls_beyond_loopback_when_told_it_is_insecure(
    redis_url: str,
    prefix: str,
    started: list[subprocess.Popen[str]],
    args: list[str],
    env: dict[str, str],
) -> None:
    where = ("--host", "0.0.0.0")
    proc, _ = serve_up(redis_url, prefix, started, *where, *args, TINYAWS_API_KEY=KEY, **env)
    assert "serving the agent calls open on 0.0.0.0 to any network" in stopped(proc)

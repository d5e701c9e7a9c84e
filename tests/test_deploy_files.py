"""The deployment files hold together: docker-compose.yml (no Docker engine runs here, so its
structure is checked), the nginx upstream, the Dockerfile and the Procfile. Every
`scheduler ...` command they run must be a real sub-command."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
import yaml

from scheduler.cli.main import build_parser
from scheduler.cli.serve_checks import Exposure, refusal
from scheduler.config import Settings
from scheduler.store.keys import Keys
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
API_PORT = 9001


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def api_services(compose: dict[str, Any]) -> list[str]:
    return sorted(
        name
        for name, svc in services(compose).items()
        if svc.get("command", [])[:2]
        == [
            "scheduler",
            "serve",
        ]
    )


def unset(arg: str) -> str:
    """`${VAR:-default}` as the shell expands it with VAR unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", arg)


def assert_valid_command(argv: list[str]) -> argparse.Namespace:
    """`scheduler ...` parses with our own command line (so a renamed flag breaks this test);
    the parsed arguments."""
    assert argv[0] == "scheduler", argv
    args = build_parser().parse_args([unset(arg) for arg in argv[1:]])
    assert callable(args.handler)
    return args


def assignments(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """A Procfile line's leading `NAME=value` words (as the shell expands them with NAME
    unset), and the command after them."""
    env = {}
    while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0]):
        name, _, value = argv.pop(0).partition("=")
        env[name] = unset(value)
    return env, argv


def test_compose_has_every_process_of_the_product(compose: dict[str, Any]) -> None:
    assert {"redis", "lb", "worker", "dashboard", "agent"} <= set(services(compose))
    assert len(api_services(compose)) >= 2


def test_redis_keeps_an_append_only_file_on_a_volume(compose: dict[str, Any]) -> None:
    redis = services(compose)["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in compose["volumes"]
    assert "healthcheck" in redis


REQUIRED_PASSWORD = r"\$\{REDIS_PASSWORD:\?[^}]+\}"
COMPOSE_REDIS_URL = re.compile(rf"redis://:{REQUIRED_PASSWORD}@redis:6379/0")


def networks(svc: dict[str, Any]) -> set[str]:
    """The networks a service joins (compose takes a list or a mapping)."""
    return set(svc.get("networks", ["default"]))


def redis_users(compose: dict[str, Any]) -> list[str]:
    """The services given Redis's URL, in any variable (rq-dashboard's included)."""
    return sorted(
        name
        for name, svc in services(compose).items()
        if any("redis://" in str(value) for value in dict(svc.get("environment", {})).values())
    )


def test_every_scheduler_process_uses_the_compose_redis(compose: dict[str, Any]) -> None:
    assert redis_users(compose) == sorted([*api_services(compose), "worker", "dashboard"])
    for name in redis_users(compose):
        env = services(compose)[name]["environment"]
        assert COMPOSE_REDIS_URL.fullmatch(env["REDIS_URL"]), name
        assert services(compose)[name]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_commands_are_real_subcommands(compose: dict[str, Any]) -> None:
    for svc in services(compose).values():
        command = svc.get("command", [])
        if command and command[0] == "scheduler":
            assert_valid_command(command)
    assert services(compose)["worker"]["command"] == ["scheduler", "worker"]
    assert services(compose)["agent"]["command"][:2] == ["scheduler", "agent"]


def test_api_replicas_listen_on_the_schedulers_port(compose: dict[str, Any]) -> None:
    for name in api_services(compose):
        command = services(compose)[name]["command"]
        assert command[command.index("--port") + 1] == str(API_PORT)
        assert command[command.index("--host") + 1] == "0.0.0.0"
        assert "ports" not in services(compose)[name]  # reached only through the balancer


def test_the_load_balancer_fronts_every_api_replica(compose: dict[str, Any]) -> None:
    lb = services(compose)["lb"]
    assert lb["image"].startswith("nginx")
    assert f"{API_PORT}:{API_PORT}" in lb["ports"]
    source, target, *_ = lb["volumes"][0].split(":")
    assert target == "/etc/nginx/nginx.conf"
    conf = (ROOT / source).read_text()
    upstream = re.search(r"upstream\s+(\w+)\s*\{(.*?)\}", conf, re.S)
    assert upstream is not None
    servers = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", upstream.group(2), re.M)
    assert sorted(host for host, _ in servers) == api_services(compose)
    assert {int(port) for _, port in servers} == {API_PORT}
    assert re.search(rf"listen\s+{API_PORT};", conf)
    assert f"proxy_pass http://{upstream.group(1)};" in conf
    assert set(lb["depends_on"]) == set(api_services(compose))


def test_the_dashboard_and_workers(compose: dict[str, Any]) -> None:
    dashboard = services(compose)["dashboard"]
    assert dashboard["command"][0] == "rq-dashboard"
    env = dashboard["environment"]
    # Its --redis-url, from the environment (`ps` would show the password on the command line).
    assert env["RQ_DASHBOARD_REDIS_URL"] == env["REDIS_URL"]
    assert not any("redis" in arg for arg in dashboard["command"][1:])
    assert dashboard["ports"] == ["127.0.0.1:9181:9181"]
    worker = services(compose)["worker"]
    assert worker["deploy"]["replicas"] >= 1
    assert worker["environment"]["SCHEDULER_DB"].startswith("/var/lib/scheduler/snapshot/")


def test_the_agent_reaches_the_api_through_the_balancer(compose: dict[str, Any]) -> None:
    agent = services(compose)["agent"]
    assert agent["environment"]["SCHEDULER_URL"] == f"http://lb:{API_PORT}"
    assert "REDIS_URL" not in agent["environment"]  # agents speak HTTP only
    assert agent["depends_on"] == ["lb"]


def test_the_image_builds_from_this_tree(compose: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for path in re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, re.M):
        for part in path.split():
            assert (ROOT / part).exists(), part
    assert re.search(r'pip install "\.\[dashboard\]"', dockerfile)
    for name in [*api_services(compose), "worker", "dashboard", "agent"]:
        assert services(compose)[name]["build"] == "."


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if line)


def test_rq_dashboard_reads_its_redis_url_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RQ_DASHBOARD_REDIS_URL is rq-dashboard's --redis-url (click's auto_envvar_prefix), so
    the deploy files keep Redis's password off its command line."""
    from rq_dashboard.cli import run

    url = "redis://:pw@redis:6379/0"
    monkeypatch.setenv("RQ_DASHBOARD_REDIS_URL", url)
    context = run.make_context(
        "rq-dashboard", ["--port", "9181"], auto_envvar_prefix="RQ_DASHBOARD"
    )
    assert context.params["redis_url"] == (url,)


def test_procfile_runs_web_worker_dashboard_and_agent() -> None:
    entries = procfile()
    assert {"web", "worker", "dashboard", "agent"} <= set(entries)
    for name in ("web", "worker", "agent"):
        assert_valid_command(assignments(shlex.split(entries[name]))[1])


# What each deploy file exposes (docs/SECURITY.md, "Deploy files"): a key wherever the API
# listens beyond loopback, and node tokens wherever the reference agent runs.


def refused(host: str, settings: Settings) -> str:
    """Why `scheduler serve --host HOST` would not start with `settings` (no flag given)."""
    return refusal(Exposure.of(host, settings, no_key=False, open_agents=False))


REQUIRED_KEY = re.compile(r"\$\{TINYAWS_API_KEY:\?[^}]+\}")
REQUIRED_JOIN_KEY = re.compile(r"\$\{AGENT_JOIN_KEY:\?[^}]+\}")


def test_compose_requires_a_key_and_runs_the_agent_calls_in_token_mode(
    compose: dict[str, Any],
) -> None:
    for name, svc in services(compose).items():
        if svc.get("build") == "." and name != "agent":  # api, worker, dashboard
            assert REQUIRED_KEY.fullmatch(svc["environment"]["TINYAWS_API_KEY"]), name
            assert REQUIRED_JOIN_KEY.fullmatch(svc["environment"]["AGENT_JOIN_KEY"]), name
    for name in api_services(compose):
        assert unset(services(compose)[name]["environment"]["AGENT_AUTH"]) == "token", name
    # The API replicas listen on every interface: without the key they would not start.
    command = services(compose)["api1"]["command"]
    host = command[command.index("--host") + 1]
    assert refused(host, Settings())
    assert not refused(host, Settings(api_key="k", agent_auth="token"))
    # With REGISTRY_URL the agent calls must be open: then AGENT_NETWORKS names who may.
    assert refused(host, Settings(api_key="k", agent_auth="open"))
    assert not refused(host, Settings(api_key="k", agent_auth="open", agent_networks="10.0.0.0/8"))


def test_the_procfile_serves_with_a_key_and_node_tokens() -> None:
    env, argv = assignments(shlex.split(procfile()["web"]))
    assert env["AGENT_AUTH"] == "token"
    args = assert_valid_command(argv)
    # On every interface (HOST unset) it starts only with TINYAWS_API_KEY, which the agent
    # line registers with.
    assert refused(args.host, Settings(agent_auth="token"))
    assert not refused(args.host, Settings(api_key="k", agent_auth="token"))
    assert shlex.split(procfile()["agent"]) == ["scheduler", "agent"]


def test_the_balancer_passes_the_clients_host_port_included() -> None:
    """The API compares a form's Origin with the Host, name and port; nginx's $host would
    drop the port and every UI form through the balancer would be refused."""
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert re.search(r"^\s*proxy_set_header Host \$http_host;", conf, re.M)


@pytest.mark.parametrize("redis_prefix, prefix", [("eu.prod-1", "eu.prod-1"), ("", "sched")])
def test_the_dashboards_look_where_the_workers_keep_rqs_keys(
    compose: dict[str, Any], redis_prefix: str, prefix: str
) -> None:
    """rq-dashboard is not ours: it must be given the RQ_KEY_PREFIX the workers derive."""
    line = procfile()["dashboard"].replace("rq-dashboard", "printenv RQ_KEY_PREFIX #", 1)
    env = {"PATH": os.environ["PATH"], "REDIS_PREFIX": redis_prefix}
    shown = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True)
    assert shown.stdout.strip() == Keys(prefix).rq_prefix
    composed = services(compose)["dashboard"]["environment"]["RQ_KEY_PREFIX"]
    assert composed.replace("${REDIS_PREFIX:-sched}", "sched") == Keys("sched").rq_prefix


def test_every_process_that_may_restore_sees_the_workers_snapshot(
    compose: dict[str, Any],
) -> None:
    """serve and worker both answer "restore the snapshot?" at start, and the first to answer
    decides for everyone (scheduler.snapshot.writer). An API replica that cannot see the workers'
    SCHEDULER_DB finds no snapshot and marks Redis "started empty": after Redis lost its data
    the jobs would never come back, and the next snapshots would overwrite their rows."""
    worker = services(compose)["worker"]
    db = worker["environment"]["SCHEDULER_DB"]
    mounts = [m for m in worker["volumes"] if db.startswith(m.split(":")[1].rstrip("/") + "/")]
    assert len(mounts) == 1 and mounts[0].split(":")[0] in compose["volumes"]
    for name in api_services(compose):
        svc = services(compose)[name]
        assert svc["environment"].get("SCHEDULER_DB") == db, name
        assert mounts[0] in svc.get("volumes", []), name


def test_the_snapshot_volume_is_writable_by_the_image_user(compose: dict[str, Any]) -> None:
    """Docker creates a named volume's mount point as root unless the image already has the
    directory (then the volume takes its owner): the worker runs as `scheduler`, not root."""
    worker = services(compose)["worker"]
    target = worker["volumes"][0].split(":")[1]
    dockerfile = (ROOT / "Dockerfile").read_text()
    user = re.search(r"^USER\s+(\S+)", dockerfile, re.M)
    assert user is not None and user.group(1) != "root"
    assert re.search(rf"mkdir -p {re.escape(target)}\b", dockerfile), target
    assert re.search(rf"chown \S*{user.group(1)}\S* {re.escape(target)}\b", dockerfile), target


# Redis asks for a password (REDIS_PASSWORD, required), never on a command line, and the
# network that runs job commands (the agent's) cannot reach it (issue 36, finding 4).


def test_compose_requires_a_redis_password_and_every_user_of_redis_sends_it(
    compose: dict[str, Any],
) -> None:
    redis_env = services(compose)["redis"]["environment"]
    assert re.fullmatch(REQUIRED_PASSWORD, redis_env["REDIS_PASSWORD"])
    for name, svc in services(compose).items():
        for variable, value in dict(svc.get("environment", {})).items():
            if "redis://" in str(value):
                assert COMPOSE_REDIS_URL.fullmatch(value), (name, variable)
        for arg in svc.get("command", []):
            assert "redis://" not in arg and "REDIS_PASSWORD}" not in arg, (name, arg)


def test_the_agent_shares_no_network_with_redis_and_the_rest_reach_what_they_need(
    compose: dict[str, Any],
) -> None:
    svc = services(compose)
    assert not networks(svc["agent"]) & networks(svc["redis"])
    for name in redis_users(compose):  # Redis's users on its network
        assert networks(svc[name]) & networks(svc["redis"]), name
    assert networks(svc["agent"]) & networks(svc["lb"])  # the agent reaches the API via lb
    for name in api_services(compose):
        assert networks(svc[name]) & networks(svc["lb"]), name
        assert not networks(svc[name]) & networks(svc["agent"]), name  # only through lb
    assert not any("ports" in svc[name] for name in ("redis", "agent"))


def test_the_fixed_addresses_are_those_the_comments_and_defaults_name(
    compose: dict[str, Any],
) -> None:
    """TRUSTED_PROXIES is lb's address where the API replicas see it (the network they share);
    AGENT_NETWORKS' example is the agent's own, which lb forwards; each inside its network's
    subnet."""
    svc = services(compose)
    subnets = {
        name: ipaddress.ip_network(net["ipam"]["config"][0]["subnet"])
        for name, net in compose["networks"].items()
    }
    (shared,) = networks(svc["api1"]) & networks(svc["lb"])
    lb_address = svc["lb"]["networks"][shared]["ipv4_address"]
    assert unset(svc["api1"]["environment"]["TRUSTED_PROXIES"]) == lb_address
    assert ipaddress.ip_address(lb_address) in subnets[shared]
    (agents,) = networks(svc["agent"])
    agent_address = svc["agent"]["networks"][agents]["ipv4_address"]
    assert ipaddress.ip_address(agent_address) in subnets[agents]
    text = (ROOT / "docker-compose.yml").read_text()
    assert f"AGENT_NETWORKS={agent_address}/32," in text


def _stub(folder: Path, name: str, body: str) -> None:
    (folder / name).write_text(f"#!/bin/sh\n{body}\n")
    (folder / name).chmod(0o755)


def test_the_compose_redis_asks_its_password_and_its_healthcheck_sends_it(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """The redis service's own command and healthcheck, run with a real redis-server (the
    image's entrypoint and the port stood in for): without the password nothing is answered,
    the password is not on the server's command line, and the healthcheck is healthy with
    the password only (redis-cli exits 0 on NOAUTH too)."""
    redis = services(compose)["redis"]
    port, password = free_port(), "0123abcd" * 8
    stubs = tmp_path / "bin"
    stubs.mkdir()
    cli = shutil.which("redis-cli")
    assert cli, "redis-cli (with redis-server, .ci/run) runs the healthcheck"
    _stub(
        stubs, "docker-entrypoint.sh", f'c=$1; shift; exec "$c" --port {port} --dir {tmp_path} "$@"'
    )
    _stub(stubs, "redis-cli", f'exec {cli} -p {port} "$@"')
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "REDIS_PASSWORD": password}
    command = [arg.replace("$$", "$") for arg in redis["command"]]  # compose's escape
    server = subprocess.Popen(command, env=env, cwd=tmp_path)
    try:
        client = wait_for_redis(port, password)
        assert password.encode() not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        with pytest.raises(redis_py.AuthenticationError):
            redis_py.Redis(port=port).ping()
        kind, check = redis["healthcheck"]["test"]
        assert kind == "CMD-SHELL"
        check = check.replace("$$", "$")
        for given, healthy in ((password, 0), ("wrong", 1), ("", 1)):
            probe = subprocess.run(["sh", "-c", check], env={**env, "REDIS_PASSWORD": given})
            assert probe.returncode == healthy, given
    finally:
        server.terminate()
        server.wait(timeout=30)


def wait_for_redis(port: int, password: str) -> redis_py.Redis:
    client = redis_py.Redis(port=port, password=password)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            return client
        except redis_py.ConnectionError:
            assert time.monotonic() < deadline, "the redis service did not start"
            time.sleep(0.05)


def test_the_procfile_keeps_the_redis_url_off_rq_dashboards_command_line() -> None:
    """`honcho start` shares the operator's REDIS_URL, which must carry Redis's password
    (docs/SECURITY.md): rq-dashboard takes it from its environment, not from its argv."""
    line = procfile()["dashboard"]
    assert "--redis-url" not in line
    shown = subprocess.run(
        ["sh", "-c", line.replace("rq-dashboard", "printenv RQ_DASHBOARD_REDIS_URL #", 1)],
        env={"PATH": os.environ["PATH"], "REDIS_URL": "redis://:pw@db:6379/0"},
        capture_output=True,
        text=True,
    )
    assert shown.stdout.strip() == "redis://:pw@db:6379/0"


def test_the_agent_registers_with_the_join_key_and_keeps_its_token(
    compose: dict[str, Any],
) -> None:
    """The agent's jobs run as its user, who can read its environment (/proc/1/environ): it
    holds the join key, which registers new node ids only, never the operator's key, which
    opens every job and node. Its node token lives on a volume, so a new container comes back
    as the same node (the join key cannot re-register a known id), in a folder the image's
    user owns."""
    agent = services(compose)["agent"]
    env = agent["environment"]
    assert "TINYAWS_API_KEY" not in env
    assert REQUIRED_JOIN_KEY.fullmatch(env["AGENT_JOIN_KEY"])
    volume, target = agent["volumes"][0].split(":")
    assert env["AGENT_WORK_DIR"] == target and volume in compose["volumes"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(rf"mkdir -p [^\n]*{re.escape(target)}\b", dockerfile), target
    assert re.search(rf"chown scheduler:scheduler [^\n]*{re.escape(target)}\b", dockerfile)

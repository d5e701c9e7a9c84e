"""AGENT_NETWORKS tried as an attacker would (docs/SECURITY.md; issue 22, item 4): with the
agent routes open only to a network the tests are not in (they connect from 127.0.0.1), every
agent call of a stranger, of a node's own token and of the join key is refused with 403 over
HTTP, through the hot lane and through ASGI, and nothing changed: no job, node, service or
token, and no script ran in Redis. X-Forwarded-For counts only from TRUSTED_PROXIES."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml
from starlette.testclient import TestClient

from scheduler.api.agent_networks import FORBIDDEN
from scheduler.api.app import create_app
from scheduler.api.server import LaneProtocol, OneWriteProtocol
from scheduler.config import ConfigError, Settings
from scheduler.store.keys import Keys
from tests.api.test_lane import answer, normalized, request
from tests.conftest import BOTH_FRONTS, Json, SettingsFactory, assert_json, assert_text_error
from tests.processes import scheduler_env, stop, wait_http
from tests.redis_server import free_port
from tests.servers import lane_checked_client, serving

KEY = "operator-key"
JOIN_KEY = "join-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
SECRET = {"DB_PASSWORD": "hunter2"}
OUTSIDE = "10.99.0.0/16"  # the agents' network; the tests' 127.0.0.1 is not in it
AGENT_HOST = "10.99.0.7"  # an address in it, as a load balancer would forward it


@dataclass
class Api:
    """One API served through the test's front; clients bound to a local address each."""

    app: Any
    port: int
    front: str
    opened: contextlib.ExitStack
    keys: Keys
    redis: redis.Redis
    tokens: dict[str, str] = field(default_factory=dict)
    operator: httpx.Client | None = None

    def client(self, local: str = "127.0.0.1") -> httpx.Client:
        url = f"http://127.0.0.1:{self.port}"
        transport = httpx.HTTPTransport(local_address=local)
        if self.front == "lane":
            client = lane_checked_client(self.app, url, transport=transport)
        else:
            client = httpx.Client(base_url=url, transport=transport)
        return self.opened.enter_context(client)

    def state(self) -> Json:
        """Everything an attack could change, read with the key (which passes anywhere)."""
        self.operator = self.operator or self.client()
        api = self.operator
        state = {
            name: assert_json(api.get(path, headers=OPERATOR))
            for name, path in (("jobs", "/jobs"), ("nodes", "/nodes"), ("services", "/services"))
        }
        for name in ("node_tokens", "tokens"):
            state[name] = self.redis.hgetall(getattr(self.keys, name))
        return state

    def scripts_run(self) -> int:
        """Scripts Redis has run so far (every state change and read of the API is one)."""
        stats = self.redis.info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


ApiFactory = Callable[..., Api]


@pytest.fixture
def serve(
    make_settings: SettingsFactory, front: str, rclient: redis.Redis, prefix: str
) -> Iterator[ApiFactory]:
    """APIs served over a socket (the peer's address is the point), through the hot lane or
    through ASGI (BOTH_FRONTS), with uvicorn's proxy headers off as `scheduler serve`."""
    with contextlib.ExitStack() as opened:

        def make(**overrides: Any) -> Api:
            # No request metrics: their flush is a script (a last one when an app stops,
            # which a lane server's thread may do during the next test), and scripts_run
            # counts the scripts the attacks make Redis run.
            app = create_app(make_settings(**{"metrics": "off", **overrides}))
            protocol = LaneProtocol if front == "lane" else OneWriteProtocol
            port = opened.enter_context(serving(app, protocol))
            return Api(app, port, front, opened, Keys(prefix), rclient)

        yield make


def deployment(serve: ApiFactory, mode: str, **overrides: Any) -> Api:
    """An API with the key whose agent routes answer OUTSIDE only (unless `overrides` say
    otherwise), with nodes n1 and n2, a job with secrets pending on n1 and n1's service
    svc-1, all set up by the operator with the key, from 127.0.0.1."""
    settings = {"agent_networks": OUTSIDE, "api_key": KEY, "agent_auth": mode, **overrides}
    if mode == "token":
        settings["agent_join_key"] = JOIN_KEY
    api = serve(**settings)
    operator = api.client()
    for node in ("n1", "n2"):
        body = {"id": node, "hostname": node, "cpu_count": 2, "role": "compute"}
        node_json = assert_json(operator.post("/nodes/register", json=body, headers=OPERATOR), 201)
        api.tokens[node] = node_json["token"]
    job = {"command": "deploy", "env_vars": SECRET}
    assert assert_json(operator.post("/jobs", json=job, headers=OPERATOR), 201)["node_id"] == "n1"
    service = {"node_id": "n1", "port": 8080, "pid": 7}
    assert operator.post("/services", json=service, headers=OPERATOR).status_code == 201
    return api


# Every agent route, as the Rust agent and an attacker call it.
AGENT_CALLS: list[tuple[str, str, str, Json | None]] = [
    ("poll n1's jobs (env_vars)", "GET", "/jobs?node_id=n1&status=pending", None),
    ("long-poll n1's jobs", "GET", "/jobs?node_id=n1&status=pending&wait=1", None),
    ("claim n1's job", "PATCH", "/jobs/job-1", {"status": "running"}),
    ("report a forged result", "PATCH", "/jobs/job-1", {"status": "done", "exit_code": 0}),
    ("register a fake node", "POST", "/nodes/register", {"id": "evil-1", "hostname": "x"}),
    ("re-register n1", "POST", "/nodes/register", {"id": "n1", "hostname": "evil"}),
    ("heartbeat n1", "POST", "/nodes/heartbeat", {"id": "n1"}),
    ("register a service on n1", "POST", "/services", {"node_id": "n1", "port": 1}),
    ("end n1's service", "PATCH", "/services/svc-1", {"status": "done"}),
    ("list n1's services", "GET", "/services?node_id=n1&status=running", None),
    ("delete n1", "DELETE", "/nodes/n1", None),
]
CALL_IDS = [call[0] for call in AGENT_CALLS]


def call(client: httpx.Client, method: str, path: str, body: Json | None, **headers: str) -> Any:
    return client.request(method, path, json=body, headers=headers)


def assert_refused_and_unchanged(api: Api, response: Any, before: Json, scripts: int) -> None:
    assert_text_error(response, 403, FORBIDDEN)
    assert api.scripts_run() == scripts  # refused before any Redis work
    assert api.state() == before
    assert "hunter2" not in response.text


@BOTH_FRONTS
@pytest.mark.parametrize("mode", ["open", "token"])
@pytest.mark.parametrize(("name", "method", "path", "body"), AGENT_CALLS, ids=CALL_IDS)
def test_every_agent_route_refuses_callers_outside_the_networks(
    serve: ApiFactory, mode: str, name: str, method: str, path: str, body: Json | None
) -> None:
    api = deployment(serve, mode)
    before = api.state()
    stranger = api.client()
    # In token mode the rule holds for credentials too: n1's own token, the join key.
    callers = [{}, {"Authorization": f"Bearer {api.tokens['n1']}"}]
    if mode == "token":
        callers.append({"Authorization": f"Bearer {JOIN_KEY}"})
    for headers in callers:
        scripts = api.scripts_run()
        response = call(stranger, method, path, body, **headers)
        assert_refused_and_unchanged(api, response, before, scripts)


@BOTH_FRONTS
def test_a_spoofed_forwarded_address_from_an_untrusted_peer_is_ignored(serve: ApiFactory) -> None:
    api = deployment(serve, "open")  # TRUSTED_PROXIES unset: the peer is the client
    before = api.state()
    stranger = api.client()
    for forwarded in (AGENT_HOST, f"{AGENT_HOST}, {AGENT_HOST}", "127.0.0.1"):
        for _, method, path, body in AGENT_CALLS:
            scripts = api.scripts_run()
            response = call(stranger, method, path, body, **{"X-Forwarded-For": forwarded})
            assert_refused_and_unchanged(api, response, before, scripts)


@BOTH_FRONTS
def test_through_a_trusted_proxy_the_forwarded_address_counts(serve: ApiFactory) -> None:
    # The tests' 127.0.0.1 plays the load balancer, which appends the address it got the
    # request from to X-Forwarded-For.
    api = deployment(serve, "open", trusted_proxies="127.0.0.1/32")
    proxy = api.client()
    before = api.state()
    poll = "/jobs?node_id=n1&status=pending"
    refused = [
        None,  # the proxy's own request: 127.0.0.1, outside
        "203.0.113.9",  # a stranger behind the proxy
        f"{AGENT_HOST}, 203.0.113.9",  # a stranger who wrote an agent's address first
        "not-an-address",
        "unknown",
    ]
    for forwarded in refused:
        headers = {} if forwarded is None else {"X-Forwarded-For": forwarded}
        scripts = api.scripts_run()
        assert_refused_and_unchanged(api, proxy.get(poll, headers=headers), before, scripts)
    # An agent behind the proxy (behind a second trusted hop too) is let in: it gets its job.
    for forwarded in (AGENT_HOST, f"203.0.113.9, {AGENT_HOST}", f"{AGENT_HOST}, 127.0.0.1"):
        polled = assert_json(proxy.get(poll, headers={"X-Forwarded-For": forwarded}))
        assert [job["job_id"] for job in polled] == ["job-1"]
        assert polled[0]["env_vars"] == SECRET


@BOTH_FRONTS
def test_the_operators_routes_are_unaffected(serve: ApiFactory) -> None:
    api = deployment(serve, "open")
    outside = api.client()
    # The operator's routes answer as ever: with the key, and 401 without (not 403).
    assert assert_json(outside.get("/jobs/job-1", headers=OPERATOR))["env_vars"] == SECRET
    assert_text_error(outside.get("/jobs/job-1"), 401, "unauthorized")
    assert_text_error(outside.post("/jobs", json={"command": "x"}), 401, "unauthorized")
    assert assert_json(outside.get("/health"))
    created = outside.post("/jobs", json={"command": "x"}, headers=OPERATOR)
    assert assert_json(created, 201)["job_id"] == "job-2"
    # The key passes on the agent routes too (it opens every job and node already).
    polled = assert_json(outside.get("/jobs?node_id=n1&status=pending", headers=OPERATOR))
    assert [job["job_id"] for job in polled] == ["job-1"]
    assert outside.delete("/nodes/n2", headers=OPERATOR).status_code == 204


@BOTH_FRONTS
@pytest.mark.parametrize("mode", ["open", "token"])
def test_an_agent_inside_the_networks_works(serve: ApiFactory, mode: str) -> None:
    # 127.0.0.2 is a loopback address of its own: the agents' network here.
    api = deployment(serve, mode, agent_networks="127.0.0.2/32")
    agent, outside = api.client("127.0.0.2"), api.client()
    token = {"Authorization": f"Bearer {api.tokens['n1']}"} if mode == "token" else {}
    poll = "/jobs?node_id=n1&status=pending"
    assert_text_error(outside.get(poll, headers=token), 403, FORBIDDEN)
    assert [job["job_id"] for job in assert_json(agent.get(poll, headers=token))] == ["job-1"]
    assert agent.patch("/jobs/job-1", json={"status": "running"}, headers=token).status_code == 200
    done = {"status": "done", "exit_code": 0, "stdout": "ok"}
    assert agent.patch("/jobs/job-1", json=done, headers=token).status_code == 200
    assert agent.post("/nodes/heartbeat", json={"id": "n1"}, headers=token).status_code == 200
    listed = assert_json(agent.get("/services?node_id=n1", headers=token))
    assert [service["id"] for service in listed] == ["svc-1"]
    assert api.state()["jobs"][0]["status"] == "done"


@BOTH_FRONTS
def test_a_refused_report_reads_no_body(serve: ApiFactory) -> None:
    """The 403 comes from the head alone: a body declared and never sent (small enough for
    the lane, or larger) is not waited for."""
    api = deployment(serve, "open")
    before = api.state()
    for size in (1000, 50_000_000):
        scripts = api.scripts_run()
        head = request("PATCH", "/jobs/job-1").replace(
            b"Content-Length: 0", b"Content-Length: %d" % size
        )
        raw = answer(api.port, head)
        assert raw.startswith(b"HTTP/1.1 403 Forbidden\r\n"), raw
        assert raw.endswith(FORBIDDEN.encode() + b"\n")
        assert api.scripts_run() == scripts
    assert api.state() == before


def test_both_fronts_answer_byte_for_byte_the_same(make_settings: SettingsFactory) -> None:
    calls = [
        request("GET", "/jobs?node_id=n1&status=pending"),
        request("GET", "/jobs?node_id=n1&status=pending", X_Forwarded_For=AGENT_HOST),
        request("PATCH", "/jobs/job-1", b'{"status":"running"}'),
        request("PATCH", "/jobs/job-1", b"{", Authorization="Bearer stranger"),
        request("POST", "/nodes/heartbeat", b'{"id":"n1"}'),
        request("GET", "/jobs/job-1"),
        request("GET", "/jobs?node_id=n1&status=pending", Authorization=f"Bearer {KEY}"),
        request("GET", "/metrics", Authorization=f"Bearer {KEY}"),
    ]
    answers = []
    with contextlib.ExitStack() as stack:
        for protocol, name in ((LaneProtocol, "lane"), (OneWriteProtocol, "asgi")):
            prefix = f"{make_settings().redis_prefix}-{name}"
            settings = make_settings(api_key=KEY, agent_networks=OUTSIDE, redis_prefix=prefix)
            port = stack.enter_context(serving(create_app(settings), protocol))
            got = [normalized(answer(port, raw)) for raw in calls]
            metrics = got.pop().split(b"\r\n\r\n", 1)[1].splitlines()
            counts = sorted(line for line in metrics if line.startswith(b"scheduler_http_requests"))
            answers.append(got + [line for line in counts if b'route="/jobs' in line])
    through_lane, through_asgi = answers
    assert through_lane == through_asgi
    assert sum(a.startswith(b"HTTP/1.1 403 ") for a in through_lane) == 5
    assert any(b'code="403"' in line for line in through_lane)  # refusals are counted


def test_serve_believes_no_forwarded_address_but_from_trusted_proxies(
    redis_url: str, prefix: str
) -> None:
    """uvicorn's own proxy headers (on by default, trusting 127.0.0.1) would make a spoofed
    X-Forwarded-For from 127.0.0.1 the client on the ASGI path: `scheduler serve` turns them
    off (`--http one-write`: every request through ASGI)."""
    port = free_port()
    env = scheduler_env(redis_url, prefix, AGENT_NETWORKS=OUTSIDE)
    cmd = [sys.executable, "-m", "scheduler", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--workers", "1", "--http", "one-write"], env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", timeout=60)
        body = {"id": "n1", "hostname": "n1"}
        for forwarded in ({}, {"X-Forwarded-For": AGENT_HOST}):
            registered = httpx.post(f"{url}/nodes/register", json=body, headers=forwarded)
            assert_text_error(registered, 403, FORBIDDEN)
        # Nothing registered; the operator's routes (no key set: anyone's) answer as ever.
        assert assert_json(httpx.get(f"{url}/nodes")) == {}
    finally:
        stop(proc)


def test_the_compose_deployment_believes_its_balancer_only() -> None:
    """docker-compose.yml: TRUSTED_PROXIES is lb's fixed address on the backend network (where
    the API replicas see it), in that network's fixed subnet, and the nginx in front appends
    the client's address to X-Forwarded-For."""
    root = Path(__file__).resolve().parent.parent.parent
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    # As compose expands them with the required variables given: ${VAR:-default} is its
    # default; ${VAR:?message} a value of the operator's (keys strong enough to start).
    given = {"REDIS_PASSWORD": "0123abcd", "TINYAWS_API_KEY": KEY, "AGENT_JOIN_KEY": JOIN_KEY}
    expanded = {
        name: re.sub(
            r"\$\{(\w+):\?[^}]*\}",
            lambda m: given[m.group(1)],
            re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value)),
        )
        for name, value in compose["x-env"].items()
    }
    settings = Settings.from_env(expanded)
    (subnet,) = compose["networks"]["backend"]["ipam"]["config"]
    lb = ip_address(compose["services"]["lb"]["networks"]["backend"]["ipv4_address"])
    assert settings.trusted_proxy_list == (ip_network(f"{lb}/32"),)
    assert lb in ip_network(subnet["subnet"])
    assert settings.agent_network_list == ()  # unset: any network, as the original
    for api in ("api1", "api2", "api3"):
        environment = compose["services"][api]["environment"]
        assert environment["TRUSTED_PROXIES"] == compose["x-env"]["TRUSTED_PROXIES"]
    nginx = (root / "deploy" / "nginx.conf").read_text()
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in nginx


BAD_LISTS = [
    ("AGENT_NETWORKS", "10.0.0.0/33"),
    ("AGENT_NETWORKS", "10.1.2.3/8"),  # host bits set: the address, or the network?
    ("AGENT_NETWORKS", "10.0.0.0/8;127.0.0.1"),
    ("TRUSTED_PROXIES", "lb"),
    ("TRUSTED_PROXIES", "10.0.0.0/8, 300.1.1.1"),
]


@pytest.mark.parametrize(("name", "raw"), BAD_LISTS)
def test_a_bad_network_stops_the_start_naming_the_variable(name: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name}: "):
        Settings.from_env({name: raw})


def test_serve_refuses_to_start_with_a_bad_network() -> None:
    env = scheduler_env("redis://127.0.0.1:1/0", "p", AGENT_NETWORKS="10.0.0.0/8,10.0.0.1/33")
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "AGENT_NETWORKS: '10.0.0.1/33'" in done.stderr


def test_lists_are_parsed() -> None:
    settings = Settings.from_env(
        {
            "AGENT_NETWORKS": " 10.0.0.0/8, 127.0.0.1 ,, ::ffff:192.168.0.0/112",
            "TRUSTED_PROXIES": "",
        }
    )
    assert [str(n) for n in settings.agent_network_list] == [
        "10.0.0.0/8",
        "127.0.0.1/32",
        "192.168.0.0/16",
    ]
    assert settings.trusted_proxy_list == ()


def test_the_rule_holds_under_a_root_path(make_settings: SettingsFactory) -> None:
    """Mounted under a root path (uvicorn's --root-path), ASGI's `path` starts with it: the
    gate decided on that path, matched no route, and let the poll through (found by the
    review). It decides on the route's path, as the router does."""
    app = create_app(make_settings(agent_networks=OUTSIDE))
    with TestClient(app, root_path="/api") as api:
        poll = api.get("/api/jobs", params={"node_id": "n1", "status": "pending"})
        assert_text_error(poll, 403, FORBIDDEN)
        assert api.get("/api/health").status_code == 200

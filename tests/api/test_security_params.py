"""Attack 1 of issue 22 (docs/SECURITY.md): a query read two ways. The door read the first
`node_id` and the handler the last, so `GET /services?node_id=n1&node_id=` passed as n1's own
list and was answered with every node's services. Every entry and method of routes.TABLE is
sent, with made-up ids, with repeated, empty and percent-encoded parameters, by a stranger
and with the key, with a key set in both AGENT_AUTH modes, through ASGI and the hot lane:
a parameter a route reads given twice is 400 for everyone, no stranger is answered with
data an agent call does not open to it, and Redis is left as it was."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.api.http import UI_COOKIE
from scheduler.api.routes import TABLE
from scheduler.api.routing import Access
from scheduler.config import Settings
from scheduler.store.keys import Keys
from tests.api.test_routes import IDS  # each path parameter's value
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    assert_json,
    assert_text_error,
    assert_ui_error,
)
from tests.deployment_state import deployment_state
from tests.servers import lane_checked_client, serving

KEY = "params-key"
KEY_HOLDER = {"Authorization": f"Bearer {KEY}"}
STRANGER: dict[str, str] = {}
SECRET = "hunter2"  # job-1's env var, on n1: the open poll of n1 shows it in open mode
CANARY = "canary-7f3"  # on n2 and in the listings only: no stranger's answer may hold it
# A plausible value of each parameter a route reads (node-scoped ones: n1, never n2).
VALUES = {
    "node_id": "n1",
    "status": "pending",
    "wait": "0",
    "limit": "5",
    "order": "newest",
    "after": "job-1",
    "before": "job-9",
    "status_not": "running",
    "role": "compute",
    "refresh": "off",
    "q": "echo",
}


@dataclass
class Cluster:
    """An API with a key (open or token agents), nodes n1 and n2, job-1 on n1 (SECRET),
    job-2 on n2 and svc-2 on n2 and schedule s1 (CANARY), svc-1 on n1."""

    api: httpx.Client | TestClient
    mode: str
    tokens: dict[str, str]
    redis: redis.Redis
    prefix: str
    operator: dict[str, str]  # the key, and a UI session's cookie

    def state(self) -> dict[bytes, Any]:
        """Every key of the deployment, dumped: what any request could have changed (but
        the request metrics, which every request adds to, and the failed logins' counters,
        which a stranger's login form adds to)."""
        failures = Keys(self.prefix).auth_failures("").encode()
        return deployment_state(self.redis, self.prefix, lambda key: key.startswith(failures))

    def send(self, method: str, target: str, headers: dict[str, str]) -> httpx.Response:
        response: httpx.Response = self.api.request(
            method, target, headers=headers, follow_redirects=False
        )
        return response


def build(api: httpx.Client | TestClient, mode: str, rclient: redis.Redis, prefix: str) -> Cluster:
    join = KEY_HOLDER if mode == "token" else {}
    tokens = {}
    for node in ("n1", "n2"):
        body = {"id": node, "hostname": node, "cpu_count": 2, "role": "compute"}
        tokens[node] = assert_json(api.post("/nodes/register", json=body, headers=join), 201)[
            "token"
        ]
    jobs = [{"command": "deploy", "env_vars": {"PASSWORD": SECRET}}, {"command": CANARY}]
    placed = [assert_json(api.post("/jobs", json=j, headers=KEY_HOLDER), 201) for j in jobs]
    assert [job["node_id"] for job in placed] == ["n1", "n2"]
    for node, url in (("n1", "http://n1.example/app"), ("n2", f"http://{CANARY}.example/app")):
        service = {"node_id": node, "port": 8080, "pid": 7, "deploy_url": url}
        assert api.post("/services", json=service, headers=KEY_HOLDER).status_code == 201
    schedule = {"name": "s1", "every_secs": 3600, "job": {"command": CANARY}}
    assert api.post("/schedules", json=schedule, headers=KEY_HOLDER).status_code == 201
    login = api.post("/ui/login", data={"key": KEY}, follow_redirects=False)
    assert login.status_code == 303, login.text
    operator = {**KEY_HOLDER, "Cookie": f"{UI_COOKIE}={login.cookies[UI_COOKIE]}"}
    api.cookies.clear()  # the operator's session goes only where `operator` is sent
    return Cluster(api, mode, tokens, rclient, prefix, operator)


@pytest.fixture(
    scope="module",
    params=[("open", "asgi"), ("open", "lane"), ("token", "asgi"), ("token", "lane")],
    ids=lambda p: "-".join(p),
)
def cluster(
    request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """One deployment per mode and front for the module: every attack must leave it as it
    was, so the tests share it (each compares the state before and after its own)."""
    mode, front = request.param
    prefix = f"t{uuid.uuid4().hex[:12]}"
    db = Path(tmp_path_factory.mktemp("params")) / "scheduler.db"
    settings = Settings.from_env(
        {},
        redis_url=redis_url,
        redis_prefix=prefix,
        scheduler_db=str(db),
        upgrade_watch_secs=0.2,
        api_key=KEY,
        agent_auth=mode,
        allowed_hosts="testserver",  # Starlette's TestClient's Host
        follow_max_secs=0,  # a follower's stream answers what is there and ends
    )
    app = create_app(settings)
    with contextlib.ExitStack() as opened:
        api: httpx.Client | TestClient
        if front == "lane":
            port = opened.enter_context(serving(app))
            api = opened.enter_context(lane_checked_client(app, f"http://127.0.0.1:{port}"))
        else:
            api = opened.enter_context(TestClient(app))
        rclient = opened.enter_context(redis.Redis.from_url(redis_url))
        yield build(api, mode, rclient, prefix)


def calls() -> Iterator[tuple[str, str, frozenset[str], Access]]:
    """(method, path with made-up ids, the parameters it reads, its access) for every entry
    and method of the table, HEAD beside each GET."""
    for entry in TABLE.entries:
        path = entry.path.format(**IDS)
        for method, found in [*entry.methods.items(), ("HEAD", entry.method("HEAD"))]:
            if found is not None:
                yield method, path, frozenset(found.reads), found.access


CALLS = list(calls())
READ = [(m, p, name) for m, p, reads, _ in CALLS for name in sorted(reads)]


def encoded(text: str) -> str:
    """Every character percent-encoded: decoded once, it is `text` again."""
    return "".join(f"%{byte:02X}" for byte in text.encode())


def repeats(name: str) -> list[str]:
    """`name` given twice: equal values, one empty, its name encoded the second time."""
    value = VALUES.get(name, "1")
    return [
        f"{name}={value}&{name}={value}",
        f"{name}={value}&{name}=",
        f"{name}=&{name}={value}",
        f"{name}={value}&{encoded(name)}=other",
        f"{name}={value}&x=1&{name}={encoded(value)}",
    ]


def answered_with_data(cluster: Cluster, response: httpx.Response) -> bool:
    """Whether a stranger got what no agent call opens to it: CANARY is in the operator's
    listings only; SECRET is n1's job, which only open mode's poll of n1 shows."""
    text = response.text
    return CANARY in text or (cluster.mode == "token" and SECRET in text)


@pytest.mark.parametrize(("method", "path", "name"), READ, ids=[" ".join(r) for r in READ])
def test_a_repeated_parameter_is_400_on_every_route_for_everyone(
    cluster: Cluster, method: str, path: str, name: str
) -> None:
    before = cluster.state()
    for query in repeats(name):
        for who in (STRANGER, cluster.operator):
            response = cluster.send(method, f"{path}?{query}", who)
            if method == "HEAD":
                assert response.status_code == 400, query
            elif path.startswith("/ui"):  # a page of the UI (api/ui_errors.py)
                assert_ui_error(response, 400, f'parameter "{name}" given more than once')
            else:
                assert_text_error(response, 400, f'parameter "{name}" given more than once')
    assert cluster.state() == before


def stranger_queries(reads: frozenset[str]) -> list[str]:
    """Each parameter a route reads empty, encoded and repeated, together and one at a time,
    the agents' calls' own queries, and names no route reads, repeated."""
    plain = {name: VALUES.get(name, "1") for name in sorted(reads)}
    queries = ["", "x=1&x=2&y", "node_id=n1&status=pending", "node_id=n1", "node_id=n1&node_id="]
    queries += [
        "&".join(f"{name}=" for name in plain),
        "&".join(f"{n}={v}" for n, v in plain.items()),
    ]
    queries += ["&".join(f"{encoded(n)}={encoded(v)}" for n, v in plain.items())]
    for name, value in plain.items():
        queries += [f"{name}=", f"{name}={encoded(value)}", f"{encoded(name)}={value}"]
        queries += [f"{name}={encoded(encoded(value))}", f"{name}={value}+", *repeats(name)]
    return queries


@pytest.mark.parametrize(
    ("method", "path"), [c[:2] for c in CALLS], ids=[f"{c[0]} {c[1]}" for c in CALLS]
)
def test_no_query_answers_a_stranger_with_data_or_changes_anything(
    cluster: Cluster, method: str, path: str
) -> None:
    reads, access = next((c[2], c[3]) for c in CALLS if c[:2] == (method, path))
    before = cluster.state()
    for query in stranger_queries(reads):
        response = cluster.send(method, f"{path}?{query}", STRANGER)
        assert response.status_code < 500, (query, response.text)
        assert not answered_with_data(cluster, response), (query, response.text)
        if cluster.mode == "token" and access is not Access.ANYONE:
            assert response.status_code >= 300, (query, response.text)
    assert cluster.state() == before


def test_the_key_holder_reads_every_parameter_a_route_declares(cluster: Cluster) -> None:
    """Each route with each parameter it declares, once: read (a handler reading a name its
    route does not declare is a 500), and nothing a read changes."""
    before = cluster.state()
    for method, path, reads, _ in CALLS:
        if method not in ("GET", "HEAD") or not reads:
            continue
        for query in stranger_queries(reads):
            response = cluster.send(method, f"{path}?{query}", cluster.operator)
            assert response.status_code < 500, (method, path, query, response.text)
    assert cluster.state() == before


def test_an_encoded_node_id_is_one_node_for_the_rule_and_the_handler(cluster: Cluster) -> None:
    """`node_id=%6e1` is n1 to the door's rule and to the handler alike: n1's own token
    gets n1's poll and list, n2's token is refused as on n1's plain id, and an escape
    decoded twice (`%256e1` is "%6e1", not n1) is no node."""
    own = {"Authorization": f"Bearer {cluster.tokens['n1']}"}
    other = {"Authorization": f"Bearer {cluster.tokens['n2']}"}
    poll = f"/jobs?node%5Fid={encoded('n1')}&status=pend%69ng"
    jobs = assert_json(cluster.send("GET", poll, own))
    assert [job["job_id"] for job in jobs] == ["job-1"]
    mine = assert_json(cluster.send("GET", f"/services?node_id={encoded('n1')}", own))
    assert [service["id"] for service in mine] == ["svc-1"]
    if cluster.mode == "token":
        assert cluster.send("GET", poll, other).status_code == 403
        assert cluster.send("GET", poll, STRANGER).status_code == 401
    twice = cluster.send("GET", "/jobs?node_id=%256e1&status=pending", own)
    assert twice.status_code == 400 and "node_id" in twice.text


@BOTH_FRONTS
def test_without_a_key_a_repeated_parameter_is_400_too(make_client: ClientFactory) -> None:
    """The door is no part of the key's middleware: with no key set (everything open) a
    repeated parameter is refused all the same, the poll's through the lane too."""
    api = make_client()
    for query in ("node_id=n1&node_id=", "node_id=n1&status=pending&node_id=n2"):
        assert_text_error(
            api.get(f"/jobs?{query}"), 400, 'parameter "node_id" given more than once'
        )
    assert_text_error(
        api.get("/services?status=a&status="), 400, 'parameter "status" given more than once'
    )

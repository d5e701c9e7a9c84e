"""The agent routes tried as an attacker would (docs/SECURITY.md): each attack in each
AGENT_AUTH mode, with TINYAWS_API_KEY set, answered as the README's table says, and the state
left as it was when the answer is a refusal."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.store.keys import Keys
from tests.conftest import BOTH_FRONTS, ClientFactory, Json, assert_json, assert_text_error

# Each test runs through ASGI and through the hot lane (tests/conftest.py, front).
pytestmark = BOTH_FRONTS

KEY = "operator-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
SECRET = {"DB_PASSWORD": "hunter2"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Cluster:
    """An API with a key, node n1 (a job bound to it, pending) and node n2, as their agents
    registered them; `tokens` holds what each agent got."""

    api: TestClient
    mode: str
    tokens: dict[str, str]
    redis: Any = None
    keys: Keys | None = None

    def state(self) -> Json:
        """Everything an attack could change: every job, node (last heartbeat included) and
        service, and the token hashes as Redis holds them."""
        jobs = assert_json(self.api.get("/jobs", headers=OPERATOR))
        nodes = assert_json(self.api.get("/nodes", headers=OPERATOR))
        services = assert_json(self.api.get("/services", headers=OPERATOR))
        state = {"jobs": jobs, "nodes": nodes, "services": services}
        if self.redis is not None and self.keys is not None:
            for name in ("node_tokens", "tokens"):
                state[name] = self.redis.hgetall(getattr(self.keys, name))
        return state

    def job(self, job_id: str = "job-1") -> Json:
        job: Json = assert_json(self.api.get(f"/jobs/{job_id}", headers=OPERATOR))
        return job


def register_node(api: TestClient, node_id: str, headers: dict[str, str]) -> str:
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
    node = assert_json(api.post("/nodes/register", json=body, headers=headers), 201)
    token: str = node["token"]
    return token


@pytest.fixture(params=["open", "token"])
def cluster(
    request: pytest.FixtureRequest, make_client: ClientFactory, rclient: Any, prefix: str
) -> Cluster:
    mode: str = request.param
    api = make_client(api_key=KEY, agent_auth=mode)
    # The agents register as they would: in token mode with the key (only it adds nodes).
    join = OPERATOR if mode == "token" else {}
    tokens = {node: register_node(api, node, join) for node in ("n1", "n2")}
    job = {"command": "deploy", "env_vars": SECRET}
    assert assert_json(api.post("/jobs", json=job, headers=OPERATOR), 201)["node_id"] == "n1"
    service = {"node_id": "n1", "port": 8080, "pid": 7}  # svc-1, a service n1 runs
    assert api.post("/services", json=service, headers=OPERATOR).status_code == 201
    return Cluster(api, mode, tokens, rclient, Keys(prefix))


STRANGER: dict[str, str] = {}


def other_node(c: Cluster) -> dict[str, str]:
    """n2's own valid token, used on n1's things."""
    return bearer(c.tokens["n2"])


def claim(c: Cluster, headers: dict[str, str]) -> Any:
    return c.api.patch("/jobs/job-1", json={"status": "running"}, headers=headers)


def poll(c: Cluster, headers: dict[str, str]) -> Any:
    return c.api.get("/jobs?node_id=n1&status=pending", headers=headers)


def heartbeat(c: Cluster, headers: dict[str, str]) -> Any:
    return c.api.post("/nodes/heartbeat", json={"id": "n1"}, headers=headers)


def register_fake(c: Cluster, headers: dict[str, str]) -> Any:
    return c.api.post("/nodes/register", json={"id": "evil-1", "hostname": "x"}, headers=headers)


def hijack_role(c: Cluster, headers: dict[str, str]) -> Any:
    body = {"id": "n1", "hostname": "n1", "role": "storage", "addr": "10.6.6.6:80"}
    return c.api.post("/nodes/register", json=body, headers=headers)


def register_service(c: Cluster, headers: dict[str, str]) -> Any:
    return c.api.post("/services", json={"node_id": "n1", "port": 1}, headers=headers)


def end_service(c: Cluster, headers: dict[str, str]) -> Any:
    return c.api.patch("/services/svc-1", json={"status": "done"}, headers=headers)


def list_services(c: Cluster, headers: dict[str, str]) -> Any:
    return c.api.get("/services?node_id=n1&status=running", headers=headers)


Attack = Callable[[Cluster, dict[str, str]], Any]
# attack, who, mode -> status. "open" answers are the original's behaviour that AGENT_AUTH=open
# keeps for the Rust agent (README lists them as what a stranger can do in that mode).
TABLE: list[tuple[str, Attack, str, int, int]] = [
    ("claim a pending job", claim, "stranger", 200, 401),
    ("claim a pending job", claim, "other node", 200, 404),
    ("poll a node's jobs (env_vars)", poll, "stranger", 200, 401),
    ("poll a node's jobs (env_vars)", poll, "other node", 200, 403),
    ("heartbeat a node", heartbeat, "stranger", 200, 401),
    ("heartbeat a node", heartbeat, "other node", 200, 403),
    ("register a fake node", register_fake, "stranger", 201, 401),
    ("re-register a live node as storage", hijack_role, "stranger", 403, 401),
    ("re-register a live node as storage", hijack_role, "other node", 403, 401),
    ("register a service on a node", register_service, "stranger", 201, 401),
    ("register a service on a node", register_service, "other node", 201, 403),
    ("mark a node's service ended", end_service, "stranger", 204, 401),
    ("mark a node's service ended", end_service, "other node", 204, 404),
    ("list a node's services", list_services, "stranger", 200, 401),
    ("list a node's services", list_services, "other node", 200, 403),
]


@pytest.mark.parametrize(
    "name, attack, who, open_status, token_status", TABLE, ids=[f"{r[0]}, {r[2]}" for r in TABLE]
)
def test_each_attack_in_each_mode(
    cluster: Cluster, name: str, attack: Attack, who: str, open_status: int, token_status: int
) -> None:
    before = cluster.state()
    headers = STRANGER if who == "stranger" else other_node(cluster)
    response = attack(cluster, headers)
    expected = open_status if cluster.mode == "open" else token_status
    assert response.status_code == expected, response.text
    if expected >= 400:
        assert cluster.state() == before
        assert "hunter2" not in response.text


def test_a_forged_result_for_a_running_job(cluster: Cluster) -> None:
    own = bearer(cluster.tokens["n1"])
    assert claim(cluster, own).status_code == 200
    before = cluster.state()
    forged = {"status": "done", "exit_code": 0, "stdout": "all good"}
    for headers in (STRANGER, other_node(cluster)):
        response = cluster.api.patch("/jobs/job-1", json=forged, headers=headers)
        if cluster.mode == "open":
            assert response.status_code == 200
            return
        assert response.status_code == (401 if headers is STRANGER else 404)
        assert cluster.state() == before
    done = {"status": "done", "exit_code": 0, "stdout": "real"}
    assert cluster.api.patch("/jobs/job-1", json=done, headers=own).status_code == 200


def test_a_refused_role_change_leaves_the_node_placing_jobs(cluster: Cluster) -> None:
    assert hijack_role(cluster, STRANGER).status_code in (401, 403)
    assert cluster.state()["nodes"]["n1"]["role"] == "compute"
    assert cluster.state()["nodes"]["n1"]["addr"] == ""
    placed = {
        cluster.api.post("/jobs", json={"command": "x"}, headers=OPERATOR).json()["node_id"]
        for _ in range(4)
    }
    assert placed == {"n1", "n2"}


def test_the_node_itself_and_the_operator_may_change_its_role(cluster: Cluster) -> None:
    body = {"id": "n1", "hostname": "n1", "role": "storage"}
    own = bearer(cluster.tokens["n1"])
    node = assert_json(cluster.api.post("/nodes/register", json=body, headers=own), 201)
    assert node["role"] == "storage"
    assert node["token"] == cluster.tokens["n1"]  # its own token stays its token
    body["role"] = "compute"
    again = assert_json(cluster.api.post("/nodes/register", json=body, headers=OPERATOR), 201)
    assert again["role"] == "compute"
    # The key's re-register hands out a fresh token (the way back for an agent that lost its
    # own), and the old one stops working.
    assert again["token"] != cluster.tokens["n1"]
    if cluster.mode == "token":
        assert poll(cluster, own).status_code == 401
        assert poll(cluster, bearer(again["token"])).status_code == 200


def test_the_original_agent_without_a_key_works_in_open_mode(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY, agent_auth="open")
    register = {"id": "rust-1", "hostname": "rust-1", "cpu_count": 2, "role": "compute"}
    assert api.post("/nodes/register", json=register).status_code == 201
    api.post("/jobs", json={"command": "echo hi"}, headers=OPERATOR)
    assert api.post("/nodes/heartbeat", json={"id": "rust-1"}).status_code == 200
    jobs = assert_json(api.get("/jobs?node_id=rust-1&status=pending"))
    assert [job["job_id"] for job in jobs] == ["job-1"]
    running = {"status": "running", "exit_code": None, "stdout": "", "stderr": ""}
    assert api.patch("/jobs/job-1", json=running).status_code == 200
    done = {"status": "done", "exit_code": 0, "stdout": "hi\n", "stderr": ""}
    assert assert_json(api.patch("/jobs/job-1", json=done))["status"] == "done"
    # Restarted, it registers again, as it did the first time: still accepted.
    assert api.post("/nodes/register", json=register).status_code == 201


def test_open_mode_with_a_key_warns_once_at_start(
    make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="scheduler.api"):
        make_client(api_key=KEY, agent_auth="open")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "AGENT_AUTH=open" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scheduler.api"):
        make_client(api_key=KEY, agent_auth="token")
        make_client(agent_auth="open")
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


# Token mode: what the tokens are, where they live, how they end.


@pytest.fixture
def token_api(make_client: ClientFactory) -> TestClient:
    return make_client(api_key=KEY, agent_auth="token")


def test_redis_holds_only_the_hash_of_a_token(token_api: TestClient, rclient: Any) -> None:
    token = register_node(token_api, "n1", OPERATOR)
    dump = b"".join(
        key + b"".join(rclient.hgetall(key)) if rclient.type(key) == b"hash" else key
        for key in rclient.keys("*")
    )
    assert token.encode() not in dump
    assert hashlib.sha256(token.encode()).hexdigest().encode() in dump


def test_a_token_works_on_every_replica_and_after_a_restart(make_client: ClientFactory) -> None:
    first = make_client(api_key=KEY, agent_auth="token")
    token = register_node(first, "n1", OPERATOR)
    second = make_client(api_key=KEY, agent_auth="token")
    assert poll_as(second, "n1", token).status_code == 200
    first.__exit__(None, None, None)  # an API restart: nothing of the token was in process
    restarted = make_client(api_key=KEY, agent_auth="token")
    assert heartbeat_as(restarted, "n1", token).status_code == 200


def test_deleting_a_node_revokes_its_token_at_once_everywhere(make_client: ClientFactory) -> None:
    first = make_client(api_key=KEY, agent_auth="token")
    second = make_client(api_key=KEY, agent_auth="token")
    token = register_node(first, "n1", OPERATOR)
    assert poll_as(first, "n1", token).status_code == 200
    assert second.delete("/nodes/n1").status_code == 401  # revoking needs the key
    assert second.delete("/nodes/n1", headers=OPERATOR).status_code == 204
    for api in (first, second):
        assert_text_error(poll_as(api, "n1", token), 401, "unauthorized")
        assert heartbeat_as(api, "n1", token).status_code == 401


def test_the_key_reaches_every_node(token_api: TestClient) -> None:
    register_node(token_api, "n1", OPERATOR)
    assert poll_as(token_api, "n1", KEY).status_code == 200
    assert heartbeat_as(token_api, "n1", KEY).status_code == 200


def test_a_garbage_token_is_401_and_a_job_of_another_node_404(token_api: TestClient) -> None:
    register_node(token_api, "n1", OPERATOR)
    n2 = register_node(token_api, "n2", OPERATOR)
    token_api.post("/jobs", json={"command": "x"}, headers=OPERATOR)  # job-1 on n1
    assert poll_as(token_api, "n1", "not-a-token").status_code == 401
    patch = {"status": "running"}
    # Another node's job is answered as a missing one (test_security_token_first.py).
    assert token_api.patch("/jobs/job-1", json=patch, headers=bearer(n2)).status_code == 404
    assert token_api.patch("/jobs/job-404", json=patch, headers=bearer(n2)).status_code == 404


def test_without_a_key_token_mode_still_keeps_nodes_apart(make_client: ClientFactory) -> None:
    """`scheduler up`'s mode: anyone may add a node, but no one else's."""
    api = make_client(agent_auth="token", node_ttl_secs=1.0)
    token = register_node(api, "n1", {})
    assert register_node(api, "n2", {})  # a new id needs nothing
    assert hijack_role(Cluster(api, "token", {}), {}).status_code == 401  # n1 is live
    assert poll_as(api, "n1", "").status_code == 401
    assert poll_as(api, "n1", token).status_code == 200


def poll_as(api: TestClient, node_id: str, token: str) -> Any:
    headers = bearer(token) if token else {}
    return api.get(f"/jobs?node_id={node_id}&status=pending", headers=headers)


def heartbeat_as(api: TestClient, node_id: str, token: str) -> Any:
    return api.post("/nodes/heartbeat", json={"id": node_id}, headers=bearer(token))


# In every mode: what a registration may cost (report bodies: test_report_bodies.py).


@pytest.mark.parametrize(
    "field, value",
    [
        ("hostname", "h" * 256),
        ("addr", "a" * 256),
        ("hostname", "bad\nhost"),
        ("cpu_count", -1),
        ("cpu_count", 65_537),
        ("role", "gpu"),
        ("id", "x" * 129),
    ],
)
def test_every_registration_field_is_bounded(
    make_client: ClientFactory, field: str, value: Any
) -> None:
    api = make_client()
    body = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute", field: value}
    response = api.post("/nodes/register", json=body)
    assert response.status_code == 400
    assert field in response.text
    assert assert_json(api.get("/nodes")) == {}


def test_a_megabyte_hostname_is_not_even_read(make_client: ClientFactory) -> None:
    api = make_client()
    response = api.post("/nodes/register", json={"id": "n1", "hostname": "h" * 1024 * 1024})
    assert response.status_code == 413
    assert assert_json(api.get("/nodes")) == {}


def test_max_nodes_bounds_new_ids_not_the_known_ones(make_client: ClientFactory) -> None:
    api = make_client(max_nodes=3)
    tokens = [register_node(api, f"n{i}", {}) for i in range(3)]
    assert_text_error(
        api.post("/nodes/register", json={"id": "n3"}), 503, "too many nodes registered (MAX_NODES)"
    )
    assert set(assert_json(api.get("/nodes"))) == {"n0", "n1", "n2"}
    body = {"id": "n0", "hostname": "n0", "cpu_count": 2, "role": "compute"}
    assert api.post("/nodes/register", json=body, headers=bearer(tokens[0])).status_code == 201
    assert api.delete("/nodes/n2").status_code == 204
    assert register_node(api, "n3", {})


def test_token_mode_without_a_key_lets_a_silent_nodes_id_be_taken_again(
    make_client: ClientFactory,
) -> None:
    """A node silent for NODE_TTL_SECS is dead: an agent that lost its token (a wiped disk)
    may register the id again, and the dead agent's token stops working."""
    api = make_client(agent_auth="token", node_ttl_secs=1.0)
    old = register_node(api, "n1", {})
    time.sleep(1.2)
    new = register_node(api, "n1", {})
    assert new != old
    assert poll_as(api, "n1", old).status_code == 401
    assert poll_as(api, "n1", new).status_code == 200


def test_the_join_key_registers_nodes_and_does_nothing_else(make_client: ClientFactory) -> None:
    """Agents can hold AGENT_JOIN_KEY instead of the operator's key: it adds a node, and
    opens nothing else: not even a dead node's id (tests/api/test_security_nodes.py)."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key="join-me", node_ttl_secs=1.0)
    join = bearer("join-me")
    assert register_fake(Cluster(api, "token", {}), {}).status_code == 401
    token = register_node(api, "n1", join)
    api.post("/jobs", json={"command": "x"}, headers=OPERATOR)
    assert poll_as(api, "n1", "join-me").status_code == 401
    assert heartbeat_as(api, "n1", "join-me").status_code == 401
    assert api.patch("/jobs/job-1", json={"status": "running"}, headers=join).status_code == 401
    for path in ("/jobs", "/nodes", "/metrics"):
        assert api.get(path, headers=join).status_code == 401
    assert hijack_role(Cluster(api, "token", {}), join).status_code == 401  # n1 is live
    time.sleep(1.2)  # n1 is now silent past NODE_TTL_SECS: still n1's own
    assert hijack_role(Cluster(api, "token", {}), join).status_code == 401
    assert poll_as(api, "n1", token).status_code == 200
    # Once the operator has deleted it, the id is a new one, which the join key may add.
    assert api.delete("/nodes/n1", headers=OPERATOR).status_code == 204
    again = register_node(api, "n1", join)
    assert again != token and poll_as(api, "n1", token).status_code == 401


def test_a_jobs_attempts_are_read_as_its_record(cluster: Cluster) -> None:
    """GET /jobs/{id}/attempts is declared as GET /jobs/{id} (the key): whoever may not read
    the record (a stranger, a node's own token, another node's) may not read its attempts,
    which hold its output too."""
    own = bearer(cluster.tokens["n1"])
    for headers in (STRANGER, own, other_node(cluster), OPERATOR):
        record = cluster.api.get("/jobs/job-1", headers=headers)
        attempts = cluster.api.get("/jobs/job-1/attempts", headers=headers)
        assert attempts.status_code == record.status_code, headers
        assert (record.status_code == 200) is (headers is OPERATOR)
    assert assert_json(cluster.api.get("/jobs/job-1/attempts", headers=OPERATOR)) == []


def test_without_a_key_anyone_reads_attempts(make_client: ClientFactory) -> None:
    """No key set (the original's open API): the attempts are as open as the record."""
    api = make_client()
    api.post("/nodes/register", json={"id": "n1", "hostname": "n1", "role": "compute"})
    assert api.post("/jobs", json={"command": "x"}).status_code == 201
    assert api.patch("/jobs/job-1", json={"status": "running"}).status_code == 200
    done = {"status": "done", "exit_code": 0, "stdout": "hi"}
    assert api.patch("/jobs/job-1", json=done).status_code == 200
    (attempt,) = assert_json(api.get("/jobs/job-1/attempts"))
    assert {k: attempt[k] for k in ("attempt", "node_id", "reason", "exit_code", "stdout")} == {
        "attempt": 1,
        "node_id": "n1",
        "reason": "done",
        "exit_code": 0,
        "stdout": "hi",
    }
    assert api.get("/jobs/job-404/attempts").status_code == 404
    assert api.get("/jobs/bad%20id/attempts").status_code == 404

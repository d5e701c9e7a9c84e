"""The built-in registry's service routes (CONTRACT 3.4, 3.5, 4.1), with the Rust agent's exact
requests, the operator's stop, and who may call them in each AGENT_AUTH mode."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from tests.conftest import BOTH_FRONTS, ClientFactory, assert_json, assert_text_error

KEY = "svc-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
# What the Rust agent sends when a service it started is up (CONTRACT 3.4 step 6), no auth.
AGENT_BODY = (
    b'{"node_id":"n1","instance_id":"","port":8080,"pid":4242,"deploy_url":"http://store/a.zip"}'
)
FIELDS = ["id", "instance_id", "node_id", "port", "pid", "status", "deploy_url", "created_at"]


def register(api: TestClient, node_id: str, headers: dict[str, str] | None = None) -> str:
    body = {"id": node_id, "hostname": node_id, "role": "compute"}
    token: str = assert_json(api.post("/nodes/register", json=body, headers=headers), 201)["token"]
    return token


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    """The API with the nodes these tests' services are for registered: a service is only a
    registered node's (tests/api/test_security_nodes.py)."""
    api = make_client()
    for node in ("n1", "n2"):
        register(api, node)
    return api


def test_the_rust_agents_service_lifecycle_in_open_mode(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY)
    register(api, "n1")
    created = api.post("/services", content=AGENT_BODY)
    service = assert_json(created, 201)
    assert list(json.loads(created.content)) == FIELDS  # the original registry's field order
    assert service["id"] == "svc-1" and service["status"] == "running"
    assert (service["port"], service["pid"], service["node_id"]) == (8080, 4242, "n1")
    # Its stop poller, every 10 s, without a key.
    stopped = "/services?node_id=n1&status=stopped"
    assert api.get(stopped).content == b"[]\n"
    assert api.delete("/services/svc-1").status_code == 401  # stopping needs the key
    assert api.delete("/services/svc-1", headers=OPERATOR).status_code == 204
    assert [s["id"] for s in assert_json(api.get(stopped))] == ["svc-1"]
    # The process died: the agent says so.
    assert api.patch("/services/svc-1", json={"status": "crashed"}).status_code == 204
    after = assert_json(api.get("/services/svc-1", headers=OPERATOR))
    assert after == {**service, "status": "crashed"}
    assert api.get("/services/svc-1").status_code == 401  # reading one needs the key
    listed = assert_json(api.get("/services?status=crashed", headers=OPERATOR))
    assert [s["id"] for s in listed] == ["svc-1"]


def test_ids_count_up_and_lists_keep_their_order(client: TestClient) -> None:
    for node in ("n1", "n2", "n1"):
        assert_json(client.post("/services", json={"node_id": node, "port": 1}), 201)
    assert [s["id"] for s in assert_json(client.get("/services"))] == ["svc-1", "svc-2", "svc-3"]
    on_n1 = assert_json(client.get("/services?node_id=n1"))
    assert [s["id"] for s in on_n1] == ["svc-1", "svc-3"]
    assert assert_json(client.get("/services?status=no%20such")) == []


@pytest.mark.parametrize(
    "method, path, body, status, text",
    [
        ("POST", "/services", {"port": 1}, 400, "node_id required"),
        ("POST", "/services", {"node_id": "a b"}, 400, None),
        ("POST", "/services", {"node_id": "n1", "port": 70000}, 400, None),
        ("POST", "/services", {"node_id": "n1", "pid": -1}, 400, None),
        (
            "POST",
            "/services",
            "not json",
            400,
            "invalid service: body: not valid JSON (invalid character at byte 4)",
        ),
        (
            "POST",
            "/services",
            {"node_id": "n1", "port": "80"},
            400,
            "invalid service: port: must be a 64-bit integer, got a string",
        ),
        (
            "PATCH",
            "/services/svc-1",
            {"status": 1},
            400,
            "invalid service: status: must be a string, got an integer",
        ),
        ("PATCH", "/services/svc-1", {}, 400, "status required"),
        ("PATCH", "/services/svc-1", {"status": "a\\nb"}, 400, None),
        ("PATCH", "/services/svc-404", {"status": "done"}, 404, "not found"),
        ("GET", "/services/svc-404", None, 404, "not found"),
        ("DELETE", "/services/svc-404", None, 404, "not found"),
        ("GET", "/services?node_id=a%20b", None, 400, None),
    ],
)
def test_bad_requests_change_nothing(
    client: TestClient, method: str, path: str, body: object, status: int, text: str | None
) -> None:
    assert_json(client.post("/services", json={"node_id": "n1"}), 201)
    before = client.get("/services").content
    kwargs = {"content": body} if isinstance(body, str) else {"json": body}
    response = client.request(method, path, **kwargs)  # type: ignore[arg-type]
    if text is None:
        assert response.status_code == status, response.text
    else:
        assert_text_error(response, status, text)
    assert client.get("/services").content == before


def test_token_mode_keeps_each_nodes_services_its_own(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY, agent_auth="token")
    n1 = {"Authorization": f"Bearer {register(api, 'n1', OPERATOR)}"}
    n2 = {"Authorization": f"Bearer {register(api, 'n2', OPERATOR)}"}
    body = {"node_id": "n1", "port": 80}
    assert api.post("/services", json=body).status_code == 401
    assert api.post("/services", json=body, headers=n2).status_code == 403
    assert assert_json(api.post("/services", json=body, headers=n1), 201)["id"] == "svc-1"
    before = assert_json(api.get("/services", headers=OPERATOR))
    assert api.patch("/services/svc-1", json={"status": "done"}).status_code == 401
    # Another node's service is answered as a missing one (the token is checked against
    # the node's index of services before the record is read).
    assert api.patch("/services/svc-1", json={"status": "done"}, headers=n2).status_code == 404
    assert api.get("/services?node_id=n1&status=stopped").status_code == 401
    assert api.get("/services?node_id=n1&status=stopped", headers=n2).status_code == 403
    assert assert_json(api.get("/services", headers=OPERATOR)) == before
    assert api.patch("/services/svc-1", json={"status": "done"}, headers=n1).status_code == 204
    assert assert_json(api.get("/services?node_id=n1", headers=n1))[0]["status"] == "done"


def test_a_node_keeps_a_bounded_number_of_services(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its cap a node's oldest finished service goes; with every one running, 503. A node
    filling its own list costs the others nothing: each list reads only its node's."""
    monkeypatch.setattr("scheduler.store.ops.services.MAX_SERVICES_PER_NODE", 3)
    for _ in range(3):
        assert_json(client.post("/services", json={"node_id": "n1"}), 201)
    assert_json(client.post("/services", json={"node_id": "n2"}), 201)  # svc-4
    assert_text_error(
        client.post("/services", json={"node_id": "n1"}), 503, "too many services registered"
    )
    assert client.patch("/services/svc-2", json={"status": "crashed"}).status_code == 204
    assert assert_json(client.post("/services", json={"node_id": "n1"}), 201)["id"] == "svc-5"
    on_n1 = [s["id"] for s in assert_json(client.get("/services?node_id=n1"))]
    assert on_n1 == ["svc-1", "svc-3", "svc-5"]
    assert client.get("/services/svc-2").status_code == 404
    assert [s["id"] for s in assert_json(client.get("/services?node_id=n2"))] == ["svc-4"]


@pytest.mark.parametrize("mode", ["open", "token"])
@pytest.mark.parametrize(
    "query", ["node_id=n1&node_id=", "node_id=n1&node_id=&status=running", "node_id=n1&node_id=n2"]
)
def test_a_repeated_node_id_does_not_turn_a_nodes_list_into_everyones(
    make_client: ClientFactory, mode: str, query: str
) -> None:
    """The door read the first node_id (an agent's own list), the handler the last, and
    `node_id=n1&node_id=` listed every node's services to anyone: now a repeated parameter
    is refused at the door (params.py), in either mode."""
    api = make_client(api_key="k", agent_auth=mode)
    operator = {"Authorization": "Bearer k"}
    for node in ("n1", "n2"):
        assert api.post("/nodes/register", json={"id": node}, headers=operator).status_code == 201
    service = {"node_id": "n2", "port": 9, "deploy_url": "http://secret"}
    assert api.post("/services", json=service, headers=operator).status_code == 201
    answer = api.get(f"/services?{query}")
    assert "secret" not in answer.text
    assert_text_error(answer, 400, 'parameter "node_id" given more than once')


@BOTH_FRONTS
def test_a_stranger_learns_nothing_of_which_services_exist(make_client: ClientFactory) -> None:
    """PATCH /services/{id} answers a garbage token 401 and another node's token 404, the
    same for a service that exists and one that does not (it was 401 against 404)."""
    api = make_client(api_key=KEY, agent_auth="token")
    n1 = {"Authorization": f"Bearer {register(api, 'n1', OPERATOR)}"}
    n2 = {"Authorization": f"Bearer {register(api, 'n2', OPERATOR)}"}
    assert api.post("/services", json={"node_id": "n1", "port": 80}, headers=n1).status_code == 201
    before = assert_json(api.get("/services", headers=OPERATOR))
    for headers, status in (({"Authorization": "Bearer garbage"}, 401), (n2, 404)):
        answers = [
            api.patch(f"/services/{sid}", json={"status": "done"}, headers=headers)
            for sid in ("svc-1", "svc-404")
        ]
        existing, missing = ((a.status_code, a.text) for a in answers)
        assert existing == missing and existing[0] == status
    assert assert_json(api.get("/services", headers=OPERATOR)) == before

"""The built-in registry (REGISTRY_URL unset): the registry routes the agent and operators use
(CONTRACT 4.1, 3.2), node liveness from heartbeats, and who gets jobs."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from starlette.testclient import TestClient

from tests.conftest import (
    ClientFactory,
    Json,
    assert_json,
    assert_text_error,
    register,
    submit,
)

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
NODE_FIELDS = {
    "id",
    "hostname",
    "addr",
    "cpu_count",
    "role",
    "status",
    "last_seen",
    "memory_mb",
    "labels",
}


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.05)


def nodes(api: TestClient, query: str = "") -> dict[str, Json]:
    listed: dict[str, Json] = assert_json(api.get(f"/nodes{query}"))
    return listed


def test_register_answers_201_with_the_node(client: TestClient) -> None:
    body = {"id": "n1", "hostname": "host-1", "cpu_count": 4}
    node = assert_json(client.post("/nodes/register", json=body), 201)
    assert set(node) == NODE_FIELDS | {"token"}  # the agent's token: an extra field
    assert {k: node[k] for k in body} == body
    assert node["role"] == "compute"  # the default
    assert node["status"] == "healthy"
    assert RFC3339_UTC.fullmatch(node["last_seen"])
    del node["token"]
    assert nodes(client) == {"n1": node}


def test_list_is_an_object_keyed_by_node_id(client: TestClient) -> None:
    assert client.get("/nodes").content == b"{}\n"
    register(client, "n2", "n1")
    client.post("/nodes/register", json={"id": "s1", "hostname": "s1", "role": "storage"})
    listed = nodes(client)
    assert set(listed) == {"n1", "n2", "s1"}
    assert all(node["id"] == node_id for node_id, node in listed.items())
    assert all(node["status"] == "healthy" for node in listed.values())
    assert set(nodes(client, "?role=compute")) == {"n1", "n2"}
    assert set(nodes(client, "?role=storage")) == {"s1"}
    assert_text_error(client.get("/nodes?role=gpu"), 400, ROLES)


def test_storage_nodes_get_no_jobs(client: TestClient) -> None:
    client.post("/nodes/register", json={"id": "s1", "hostname": "s1", "role": "storage"})
    assert_text_error(client.post("/jobs", json={"command": "x"}), 503, "no healthy compute nodes")
    register(client, "n1")
    assert {submit(client, command=f"c{i}")["node_id"] for i in range(3)} == {"n1"}


def test_reregistering_with_another_role_moves_the_node(client: TestClient) -> None:
    first = assert_json(client.post("/nodes/register", json={"id": "n1", "hostname": "n1"}), 201)
    again = {"id": "n1", "hostname": "n1", "role": "storage"}
    token = {"Authorization": f"Bearer {first['token']}"}  # only the node itself may
    assert client.post("/nodes/register", json=again, headers=token).status_code == 201
    assert set(nodes(client, "?role=compute")) == set()
    assert_text_error(client.get("/schedule"), 503, "no healthy compute nodes")


ROLES = "invalid role: use one of compute, storage"
NODE = "failed to decode node"
CPU_COUNT = "cpu_count: must be a 64-bit integer"


# The original's `failed to decode node`, then which field and what it must be (issue 38).
@pytest.mark.parametrize(
    "body, message",
    [
        (b"", f"{NODE}: body: empty (send a JSON object)"),
        (b"{", f"{NODE}: body: not valid JSON (it ends inside a value)"),
        (b"[]", f"{NODE}: body: must be a JSON object, got an array"),
        (b'{"id":"n1","cpu_count":"2"}', f"{NODE}: {CPU_COUNT}, got a string"),
        (b'{"id":"n1","cpu_count":2.5}', f"{NODE}: {CPU_COUNT}, got a number"),
        (b'{"id":1}', f"{NODE}: id: must be a string, got an integer"),
        (b'{"id":"n1","role":7}', f"{NODE}: role: must be a string, got an integer"),
        # Go's registry and its readers (the load balancer) decode cpu_count into an int64.
        (b'{"id":"n1","cpu_count":9223372036854775808}', f"{NODE}: {CPU_COUNT}"),
    ],
)
def test_register_decode_errors(client: TestClient, body: bytes, message: str) -> None:
    assert_text_error(client.post("/nodes/register", content=body), 400, message)
    assert client.get("/nodes").content == b"{}\n"


@pytest.mark.parametrize(
    "body", [{"id": ""}, {}, {"id": "n1", "role": "gpu"}, {"id": "n1", "role": "Compute"}]
)
def test_register_invalid_values_are_400(client: TestClient, body: Json) -> None:
    response = client.post("/nodes/register", json=body)
    assert response.status_code == 400
    assert client.get("/nodes").content == b"{}\n"


def test_heartbeat_answers_the_node(client: TestClient) -> None:
    register(client, "n1")
    node = assert_json(client.post("/nodes/heartbeat", json={"id": "n1"}))
    assert set(node) == NODE_FIELDS
    assert (node["id"], node["status"], node["role"]) == ("n1", "healthy", "compute")
    assert nodes(client)["n1"]["last_seen"] == node["last_seen"]


@pytest.mark.parametrize(
    "body, detail",
    [
        (b"", "body: empty (send a JSON object)"),
        (b"{", "body: not valid JSON (it ends inside a value)"),
        (b'{"id":5}', "id: must be a string, got an integer"),
        (b"[]", "body: must be a JSON object, got an array"),
    ],
)
def test_heartbeat_decode_errors(client: TestClient, body: bytes, detail: str) -> None:
    response = client.post("/nodes/heartbeat", content=body)
    assert_text_error(response, 400, f"failed to decode heartbeat: {detail}")


def test_heartbeat_of_an_unknown_node_is_404(client: TestClient) -> None:
    assert_text_error(client.post("/nodes/heartbeat", json={"id": "n1"}), 404, "node not found")
    assert client.get("/nodes").content == b"{}\n"


def test_delete_node(client: TestClient) -> None:
    register(client, "n1", "n2")
    response = client.delete("/nodes/n1")
    assert response.status_code == 204 and response.content == b""
    assert set(nodes(client)) == {"n2"}
    assert_text_error(client.delete("/nodes/n1"), 404, "node not found")
    assert_text_error(client.post("/nodes/heartbeat", json={"id": "n1"}), 404, "node not found")
    assert {submit(client, command=f"c{i}")["node_id"] for i in range(3)} == {"n2"}


def test_instances_is_an_empty_list(client: TestClient) -> None:
    register(client, "n1")
    for query in ("?node_id=n1", "?node_id=ghost", "", "?status=running"):
        assert client.get(f"/instances{query}").content == b"[]\n"


def test_instance_bound_job_has_no_instance_to_go_to(client: TestClient) -> None:
    register(client, "n1")
    response = client.post("/jobs", json={"command": "x", "instance_id": "i-1"})
    assert_text_error(response, 503, "instance not found")
    assert client.get("/jobs").content == b"[]\n"


def test_silent_node_turns_unhealthy_and_gets_no_jobs(make_client: ClientFactory) -> None:
    api = make_client(node_ttl_secs=2)  # n2 must stay live across two requests
    register(api, "n1", "n2")
    # n2 keeps beating, n1 falls silent.
    wait_for(
        lambda: (
            api.post("/nodes/heartbeat", json={"id": "n2"}).status_code == 200
            and nodes(api)["n1"]["status"] == "unhealthy"
        )
    )
    assert nodes(api)["n1"]["last_seen"] < nodes(api)["n2"]["last_seen"]
    placed = []
    for i in range(4):
        assert api.post("/nodes/heartbeat", json={"id": "n2"}).status_code == 200
        placed.append(submit(api, command=f"c{i}")["node_id"])
    assert placed == ["n2"] * 4
    # A heartbeat brings n1 back.
    beat = assert_json(api.post("/nodes/heartbeat", json={"id": "n1"}))
    assert beat["status"] == "healthy"
    assert nodes(api)["n1"]["status"] == "healthy"


def test_all_nodes_silent_is_503(make_client: ClientFactory) -> None:
    api = make_client(node_ttl_secs=1)
    register(api, "n1")
    wait_for(lambda: nodes(api)["n1"]["status"] == "unhealthy")
    assert_text_error(api.get("/schedule"), 503, "no healthy compute nodes")
    assert_text_error(api.post("/jobs", json={"command": "x"}), 503, "no healthy compute nodes")
    assert api.get("/jobs").content == b"[]\n"

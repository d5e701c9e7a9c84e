"""Placement on the API (docs/GUIDE.md, Placement): a job's asks and a node's offer are validated
with a 400 naming the field that changes nothing; GET /nodes shows what a node offers; the
Rust agent's registration (no memory, no labels) keeps the original's placement; with an
external registry, which knows no labels nor room, a job that asks is refused. Each attack
on the new fields is a test."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.models.labels import SYNTAX
from scheduler.store.keys import Keys
from tests.conftest import BOTH_FRONTS, ClientFactory, assert_json, assert_text_error, submit


def register(api: TestClient, node_id: str, **fields: Any) -> Any:
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute", **fields}
    return api.post("/nodes/register", json=body)


@BOTH_FRONTS
@pytest.mark.parametrize(
    "fields, message",
    [
        ({"cpus": -1}, "invalid cpus -1: use 0 to 65536"),
        ({"memory_mb": 2**24 + 1}, "invalid memory_mb 16777217: use 0 to 16777216"),
        (
            {"node_selector": {"zone": "a b"}},
            "invalid node_selector value 'a b' for zone: " + SYNTAX,
        ),
        ({"node_selector": {"": "x"}}, "invalid node_selector key '': " + SYNTAX),
        ({"node_selector": {"zone": []}}, "invalid node_selector: 'zone' needs 1 to 16 values"),
        (
            {"node_selector": {f"k{i}": "v" for i in range(17)}},
            "invalid node_selector: at most 16 keys",
        ),
        (
            {"instance_id": "i-1", "node_selector": {"node.id": "n1"}},
            "invalid node_selector: an instance's job runs on its instance's node",
        ),
    ],
)
def test_a_bad_ask_is_a_400_naming_the_field_that_changes_nothing(
    make_client: ClientFactory,
    rclient: redis.Redis,
    prefix: str,
    fields: dict[str, Any],
    message: str,
) -> None:
    api = make_client()
    assert register(api, "n1").status_code == 201
    before = rclient.get(Keys(prefix).job_seq)
    response = api.post("/jobs", json={"command": "x", **fields})
    assert_text_error(response, 400, message)
    assert rclient.get(Keys(prefix).job_seq) == before


SELECTOR = "node_selector: must be an object of strings or lists of strings, got"


@pytest.mark.parametrize(
    "fields, detail",
    [
        ({"cpus": "4"}, "cpus: must be an integer, got a string"),
        ({"node_selector": {"zone": 1}}, f"{SELECTOR} an integer at node_selector[...]"),
        ({"node_selector": ["zone=a"]}, f"{SELECTOR} an array"),
        ({"node_selector": {"zone": {"a": "b"}}}, f"{SELECTOR} an object at node_selector[...]"),
        ({"node_selector": {"zone": [1]}}, f"{SELECTOR} an integer at node_selector[...][0]"),
    ],
)
def test_an_ask_of_the_wrong_type_is_a_400(
    client: TestClient, fields: dict[str, Any], detail: str
) -> None:
    assert register(client, "n1").status_code == 201
    response = client.post("/jobs", json={"command": "x", **fields})
    assert_text_error(response, 400, f"failed to decode job: {detail}")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"memory_mb": -1}, "invalid memory_mb -1: use 0 to 16777216"),
        ({"labels": {"node.id": "n2"}}, "invalid labels key 'node.id': node.* is the scheduler's"),
        (
            {"labels": {"node.hostname": "h"}},
            "invalid labels key 'node.hostname': node.* is the scheduler's",
        ),
        ({"labels": {"zone": "a\nb"}}, "invalid labels value 'a\\nb' for zone"),
        ({"labels": {f"k{i}": "v" for i in range(17)}}, "invalid labels: at most 16"),
        ({"labels": {"k" * 64: "v"}}, "invalid labels key"),
    ],
)
def test_a_bad_offer_is_a_400_naming_the_field_that_changes_nothing(
    client: TestClient, rclient: redis.Redis, prefix: str, fields: dict[str, Any], message: str
) -> None:
    response = register(client, "n1", **fields)
    assert response.status_code == 400, response.text
    assert response.text.startswith(message)
    assert not rclient.hexists(Keys(prefix).nodes, "n1")
    assert not list(rclient.scan_iter(Keys(prefix).label_nodes("*")))


def test_get_nodes_shows_what_a_node_offers(client: TestClient) -> None:
    assert (
        register(client, "n1", memory_mb=2048, labels={"zone": "a", "disk": "ssd"}).status_code
        == 201
    )
    # The Rust agent's registration: neither memory nor labels.
    rust = {"id": "n2", "hostname": "n2", "cpu_count": 4, "role": "compute"}
    assert client.post("/nodes/register", json=rust).status_code == 201
    nodes = assert_json(client.get("/nodes"))
    assert (nodes["n1"]["memory_mb"], nodes["n1"]["labels"]) == (2048, {"disk": "ssd", "zone": "a"})
    assert (nodes["n2"]["memory_mb"], nodes["n2"]["labels"]) == (0, {})
    # 0 memory is unknown: a job asking memory may go there, as any job did before.
    assert submit(client, command="x", memory_mb=4096)["node_id"] == "n2"


def test_a_node_cannot_take_another_nodes_name(client: TestClient) -> None:
    """node.id and node.hostname are the scheduler's: a node claiming another's name in its
    labels is refused, so a job naming a node goes to that node only."""
    assert register(client, "n1").status_code == 201
    assert register(client, "evil", labels={"node.id": "n1"}).status_code == 400
    assert register(client, "evil", hostname="n1").status_code == 201  # its own hostname label
    for _ in range(4):
        assert submit(client, command="x", node_selector={"node.id": "n1"})["node_id"] == "n1"


def test_an_external_registry_refuses_a_job_that_asks(make_client: ClientFactory) -> None:
    api = make_client(registry_url="http://127.0.0.1:9")  # never asked: refused before
    response = api.post("/jobs", json={"command": "x", "cpus": 1})
    assert_text_error(
        response,
        400,
        "invalid node_selector: cpus, memory_mb and node_selector need the built-in registry "
        "(REGISTRY_URL unset)",
    )


def test_an_unplaced_job_reads_with_its_reason_and_no_null(client: TestClient) -> None:
    created = assert_json(client.post("/jobs", json={"command": "x", "cpus": 1}), 201)
    assert (created["node_id"], created["pending_reason"]) == ("", "no_nodes")
    got = assert_json(client.get(f"/jobs/{created['job_id']}"))
    assert got == created
    listed = assert_json(client.get("/jobs", params={"status": "pending"}))
    assert [j["job_id"] for j in listed] == [created["job_id"]]


def test_the_ui_says_why_a_job_waits(client: TestClient) -> None:
    assert register(client, "n1", labels={"zone": "a"}).status_code == 201
    placed = submit(client, command="x", cpus=2, node_selector={"zone": ["a", "b"]})
    waiting = submit(client, command="y", cpus=2)
    page = client.get(f"/ui/jobs/{waiting['job_id']}").text
    said = '<span class="why" title="full">the nodes that fit have no room for it now</span>'
    assert f"<th>reason</th><td>{said}</td>" in page  # in words, once: its code on hover
    assert '<span class="muted">none yet</span>' in page
    assert "zone=a|b" in client.get(f"/ui/jobs/{placed['job_id']}").text
    listing = client.get("/ui/jobs").text
    assert '<span class="st reason full">full</span>' in listing

"""Issue 41, item 2: nodes serve every namespace unless labelled for some (docs/GUIDE.md, "Nodes
for some namespaces"), over HTTP, through ASGI and the hot lane (tests/conftest.py, front):
a registration says the namespaces in its `namespace` label (a value naming none is 400,
nothing stored); teams' keys each get their own nodes and the shared ones, never another
team's; a job no live node serves waits with pending_reason `namespace`, shown in words on
its page, and is placed once such a node registers; a sharded deployment passes a job on
to the shard whose nodes serve it."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store import ops
from scheduler.store.shards import Layout
from scheduler.store.sync_store import SyncJobStore
from tests.api.test_namespaces import ADMIN, ADMIN_KEY, make_key
from tests.api.test_roles import as_key
from tests.api.test_shards_placement import SHARDS, node_on
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    Json,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
)

RULE = ": the namespaces the node serves, each once, joined by '.' (team-a, or team-a.default)"


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(api_key=ADMIN_KEY)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def node(api: TestClient, node_id: str, **labels: str) -> None:
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
    assert_json(api.post("/nodes/register", json={**body, "labels": labels}, headers=ADMIN), 201)


def submit(api: TestClient, headers: dict[str, str], **job: object) -> Json:
    made: Json = assert_json(api.post("/jobs", json={"command": "x", **job}, headers=headers), 201)
    return made


@BOTH_FRONTS
def test_a_node_says_the_namespaces_it_serves_in_its_labels(api: TestClient) -> None:
    node(api, "a", namespace="team-a.team-b", zone="x")
    nodes = assert_json(api.get("/nodes", headers=ADMIN))
    assert nodes["a"]["labels"] == {"namespace": "team-a.team-b", "zone": "x"}
    for value in ("Team_A", "team-a..team-b", "team-a.team-a", ""):
        body = {"id": "bad", "hostname": "bad", "cpu_count": 1, "labels": {"namespace": value}}
        answer = api.post("/nodes/register", json=body, headers=ADMIN)
        assert_text_error(answer, 400, f"invalid labels value {value!r} for namespace{RULE}")
    assert "bad" not in assert_json(api.get("/nodes", headers=ADMIN))


@BOTH_FRONTS
def test_each_teams_jobs_go_to_its_own_nodes_or_the_shared_ones(api: TestClient) -> None:
    node(api, "a", namespace="team-a")
    node(api, "b", namespace="team-b")
    register(api, "s")  # no labels: the Rust agent's registration, every namespace's node
    keys = {
        "team-a": as_key(make_key(api, "alice", "submitter", ["team-a"])),
        "team-b": as_key(make_key(api, "bob", "submitter", ["team-b"])),
        "default": ADMIN,
    }
    mix = ("team-a", "team-a", "team-b", "team-b", "default")
    made = [submit(api, keys[mix[i % 5]]) for i in range(60)]
    where: dict[str, set[str]] = {"team-a": set(), "team-b": set(), "default": set()}
    for job in made:
        where[job.get("namespace", "default")].add(job["node_id"])
    assert where == {"team-a": {"a", "s"}, "team-b": {"b", "s"}, "default": {"s"}}
    # As each is stored, not only as answered.
    for job in made:
        assert assert_json(api.get(f"/jobs/{job['job_id']}", headers=ADMIN)) == job


@BOTH_FRONTS
def test_a_job_no_node_serves_waits_and_is_placed_when_one_registers(
    api: TestClient, store: SyncJobStore
) -> None:
    node(api, "a", namespace="team-a")
    waiting = submit(api, ADMIN)
    assert (waiting["status"], waiting["node_id"]) == ("pending", "")
    assert waiting["pending_reason"] == "namespace"
    api.post("/ui/login", data={"key": ADMIN_KEY}, follow_redirects=False)
    page = api.get(f"/ui/jobs/{waiting['job_id']}").text
    api.cookies.clear()
    assert "no live node serves namespace &#x27;default&#x27;" in page
    assert submit(api, ADMIN, namespace="team-a")["node_id"] == "a"
    register(api, "s")
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [waiting["job_id"]]
    placed = assert_json(api.get(f"/jobs/{waiting['job_id']}", headers=ADMIN))
    assert (placed["node_id"], placed.get("pending_reason")) == ("s", None)
    polled = assert_json(api.get("/jobs", params={"node_id": "s", "status": "pending"}))
    assert [job["job_id"] for job in polled] == [waiting["job_id"]]


def test_a_sharded_deployment_passes_a_job_on_to_a_shard_that_serves_it(
    make_client: ClientFactory,
) -> None:
    api = make_client(shards=SHARDS)
    team_a = node_on(2, "team-a")
    for shard in (0, 1):
        body = {"id": node_on(shard, "b"), "hostname": "b", "cpu_count": 2}
        labels = {"namespace": "team-b"}
        assert_json(api.post("/nodes/register", json={**body, "labels": labels}), 201)
    body = {"id": team_a, "hostname": "a", "cpu_count": 2, "labels": {"namespace": "team-a"}}
    assert_json(api.post("/nodes/register", json=body), 201)
    made = [assert_json(api.post("/jobs", json={"command": "x", "namespace": "team-a"}), 201)]
    made += [assert_json(api.post("/jobs", json={"command": "x", "namespace": "team-a"}), 201)]
    assert {job["node_id"] for job in made} == {team_a}
    assert {Layout(SHARDS).job_shard(job["job_id"]) for job in made} == {2}
    # The default namespace's: no shard has a node for it, so it waits, saying why.
    waiting = assert_json(api.post("/jobs", json={"command": "x"}), 201)
    assert (waiting["node_id"], waiting["pending_reason"]) == ("", "namespace")

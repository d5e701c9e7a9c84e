"""Nodes for some namespaces against a real Redis (docs/GUIDE.md, "Nodes for some namespaces";
issue 41, item 2): a node labelled `namespace=team-a` never gets another namespace's job,
whichever path puts it there (a submit, the unplaced pass, a due job, a retry, a theft, a
lost, drained, deleted or handed-over node's moves); an unlabelled node takes any; a job no
live node serves waits with pending_reason `namespace` and is placed once one registers. The
pure rules' tables are tests/nodes/test_namespace_nodes.py's."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.labels import node_labels, serves
from scheduler.nodes.placement import Ask, NodeRoom, find_node
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    Json,
    SettingsFactory,
    assert_json,
    assert_text_error,
    last_heard,
    report,
    submit,
)
from tests.store.test_placement_store import assert_holds_match_jobs, holding

TTL = 30.0
TEAM_A = {"namespace": "team-a"}
TEAM_B = {"namespace": "team-b"}
NAMESPACES = ("", "team-a", "team-b")  # as stored: "" the default's


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=TTL, max_job_retries=1)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def node(api: TestClient, node_id: str, cpus: int = 0, **labels: str) -> None:
    body = {"id": node_id, "hostname": node_id, "cpu_count": cpus, "role": "compute"}
    body["labels"] = labels
    assert api.post("/nodes/register", json=body).status_code == 201


def job(api: TestClient, namespace: str = "", **fields: Any) -> Json:
    return submit(api, command="sleep 1", namespace=namespace, **fields)


def get(api: TestClient, job_id: str) -> Json:
    return assert_json(api.get(f"/jobs/{job_id}"))


def namespace_of(made: Json) -> str:
    return str(made.get("namespace", ""))


LABELS = {"a": TEAM_A, "a2": TEAM_A, "b": TEAM_B, "s": {}, "t": {}}


def assert_each_on_a_node_serving_it(api: TestClient, jobs: list[Json]) -> None:
    for made in jobs:
        now = get(api, made["job_id"])
        if now["node_id"]:
            labels = LABELS[now["node_id"]]
            assert serves(labels, namespace_of(made)), (made["job_id"], now["node_id"])


def test_a_team_nodes_never_get_another_namespaces_jobs(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "a", cpus=64, **TEAM_A)
    node(api, "b", cpus=64, **TEAM_B)
    node(api, "s", cpus=64)
    # Fewer of the default's, so s, the least loaded now and then, takes teams' jobs too.
    mix = ("", "team-a", "team-a", "team-b", "team-b")
    made = [job(api, mix[i % 5], cpus=i % 2) for i in range(100)]
    where: dict[str, set[str]] = {ns: set() for ns in NAMESPACES}
    for one in made:
        where[namespace_of(one)].add(one["node_id"])
    # Each namespace's jobs on its own node or the shared one; the default's on s only.
    assert where == {"": {"s"}, "team-a": {"a", "s"}, "team-b": {"b", "s"}}
    assert_holds_match_jobs(rclient, prefix)


def test_no_label_no_index_and_every_node_serves_every_namespace(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    """A deployment that labels no node (the Rust agent registers none) places as before:
    nothing is indexed, and any node takes any namespace's job."""
    node(api, "s")
    node(api, "t", zone="x")
    made = [job(api, NAMESPACES[i % 3]) for i in range(9)]
    assert {one["node_id"] for one in made} == {"s", "t"}
    assert not rclient.exists(Keys(prefix).nodes_namespaces)
    # A node labelled, then registered again without: the index empties with it.
    node(api, "t", **TEAM_A)
    assert rclient.hgetall(Keys(prefix).nodes_namespaces) == {b"t": b"team-a"}
    node(api, "t")
    assert not rclient.exists(Keys(prefix).nodes_namespaces)


def test_a_job_no_node_serves_waits_and_is_placed_once_one_registers(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "a", **TEAM_A)
    plain = job(api)
    team_b = job(api, "team-b", cpus=1)
    for waiting in (plain, team_b):
        assert (waiting["status"], waiting["node_id"]) == ("pending", "")
        assert waiting["pending_reason"] == "namespace"
    assert job(api, "team-a")["node_id"] == "a"
    assert store.run(ops.upkeep.place_unplaced(time.time())) == []
    # A node for team-b takes its job; the default's still waits.
    node(api, "b", **TEAM_B)
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [team_b["job_id"]]
    assert get(api, team_b["job_id"])["node_id"] == "b"
    assert get(api, plain["job_id"])["pending_reason"] == "namespace"
    # a serves the default namespace too once it says so.
    node(api, "a", namespace="team-a.default")
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [plain["job_id"]]
    assert get(api, plain["job_id"])["node_id"] == "a"
    assert_holds_match_jobs(rclient, prefix)


def test_the_usual_reasons_among_the_nodes_that_serve_a_job(
    api: TestClient, rclient: redis.Redis, prefix: str, settings: Settings
) -> None:
    node(api, "a", cpus=2, **TEAM_A)
    node(api, "b", cpus=16, **TEAM_B)
    assert job(api, "team-a", cpus=4)["pending_reason"] == "no_fit"  # b offers it: not a's
    assert job(api, "team-a", node_selector={"node.id": "b"})["pending_reason"] == "no_fit"
    assert job(api, "team-a", cpus=2)["node_id"] == "a"
    assert job(api, "team-a", cpus=1)["pending_reason"] == "full"
    assert api.post("/nodes/a/drain").status_code == 200
    assert job(api, "team-a")["pending_reason"] == "drained"
    # No live node at all: a plain job is the original's 503, whatever the labels.
    for node_id in "ab":
        last_heard(rclient, settings, node_id, time.time() - TTL - 1)
    assert_text_error(api.post("/jobs", json={"command": "x"}), 503, "no healthy compute nodes")
    assert job(api, "team-a", cpus=1)["pending_reason"] == "no_nodes"
    assert_holds_match_jobs(rclient, prefix)


def lose(rclient: redis.Redis, settings: Settings, lost: str, living: str) -> float:
    """`lost` silent past NODE_LOST_SECS, the `living` nodes heard from at the time returned."""
    now = time.time() + 4 * TTL + 1
    last_heard(rclient, settings, lost, time.time() - 4 * TTL - 1)
    for node_id in living:
        last_heard(rclient, settings, node_id, now)
    return now


def test_a_lost_nodes_jobs_go_only_to_nodes_that_serve_them(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str, settings: Settings
) -> None:
    node(api, "a", **TEAM_A)
    node(api, "b", **TEAM_B)
    running = job(api, "team-a")
    pending = [job(api, "team-a", node_selector={"node.id": "a"}) for _ in range(2)]
    plain = [job(api, "team-a") for _ in range(4)]  # a is the one node for them
    assert {get(api, one["job_id"])["node_id"] for one in plain} == {"a"}
    assert report(api, running["job_id"], "running").status_code == 200
    now = lose(rclient, settings, "a", "b")
    # Its running job is tried again, its pending ones move: none to b, so they wait.
    assert [lost.job_id for lost in store.run(ops.upkeep.lose_running(now))] == [running["job_id"]]
    moved = store.run(ops.upkeep.requeue_lost(now))
    assert {m.job_id for m in moved} == {one["job_id"] for one in pending + plain}
    assert store.run(ops.upkeep.place_unplaced(now)) == []
    for one in [running, *plain, *pending]:
        after = get(api, one["job_id"])
        assert (after["node_id"], after["pending_reason"]) == ("", "namespace")
    # A node for every namespace comes: the plain ones and the retry go there, never to b.
    node(api, "s")
    last_heard(rclient, settings, "s", now)
    placed = store.run(ops.upkeep.place_unplaced(now))
    assert sorted(placed) == sorted(one["job_id"] for one in [running, *plain])
    assert {get(api, job_id)["node_id"] for job_id in placed} == {"s"}
    for one in pending:  # pinned to a, which is lost
        assert get(api, one["job_id"])["pending_reason"] == "no_fit"
    assert_holds_match_jobs(rclient, prefix)


def test_a_lost_nodes_jobs_go_round_robin_while_no_node_is_labelled(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    """Without namespace labels the moves are as before: at once, to a live node."""
    node(api, "a")
    made = [job(api, "team-a") for _ in range(2)]
    node(api, "b")
    now = lose(rclient, settings, "a", "b")
    moved = store.run(ops.upkeep.requeue_lost(now))
    assert {(m.job_id, m.to_node) for m in moved} == {(one["job_id"], "b") for one in made}


def test_drained_and_deleted_nodes_jobs_keep_their_namespace(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "a", **TEAM_A)
    on_a = [job(api, "team-a") for _ in range(3)]
    node(api, "b", **TEAM_B)
    node(api, "s")
    node(api, "a2", **TEAM_A)
    # A drain: placed at once, on a node that serves team-a (a2 or s), never b.
    answer = assert_json(api.post("/nodes/a/drain"))
    assert (answer["moved"], answer["unplaced"]) == (3, 0)
    assert {get(api, one["job_id"])["node_id"] for one in on_a} <= {"a2", "s"}
    assert_each_on_a_node_serving_it(api, on_a)
    # A delete: its jobs wait unplaced for the pass, which puts them where they may run.
    on_a2 = [one for one in on_a if get(api, one["job_id"])["node_id"] == "a2"]
    assert on_a2
    assert api.delete("/nodes/a2").status_code == 204
    assert [get(api, one["job_id"])["node_id"] for one in on_a2] == [""] * len(on_a2)
    assert sorted(store.run(ops.upkeep.place_unplaced(time.time()))) == sorted(
        one["job_id"] for one in on_a2
    )
    assert {get(api, one["job_id"])["node_id"] for one in on_a} == {"s"}
    assert_holds_match_jobs(rclient, prefix)


def test_due_and_retried_jobs_keep_their_namespace(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str, settings: Settings
) -> None:
    node(api, "a", **TEAM_A)
    node(api, "s")
    delayed = [job(api, ns, delay_secs=0.5) for ns in NAMESPACES[:2] for _ in range(3)]
    # s falls silent: when due, the default's jobs have no node; team-a's go to a.
    now = time.time() + 1
    last_heard(rclient, settings, "s", now - TTL - 1)
    last_heard(rclient, settings, "a", now)
    assert sorted(store.run(ops.upkeep.promote_due(now))) == sorted(d["job_id"] for d in delayed)
    for one in delayed:
        after = get(api, one["job_id"])
        expected = ("a", "pending") if one.get("namespace") else ("", "pending")
        assert (after["node_id"], after["status"]) == expected
        if not one.get("namespace"):
            assert after["pending_reason"] == "namespace"
    # A failed default job retried by hand: placed as a new one, so it waits too. (s comes
    # back by its heartbeat, which puts it among the placeable nodes again.)
    assert api.post("/nodes/heartbeat", json={"id": "s"}).status_code == 200
    failed = job(api, max_retries=0)
    assert failed["node_id"] == "s"
    last_heard(rclient, settings, "s", time.time() - TTL - 1)
    assert report(api, failed["job_id"], "running").status_code == 200
    assert report(api, failed["job_id"], "failed", exit_code=1).status_code == 200
    retried = assert_json(api.post(f"/jobs/{failed['job_id']}/retry"))
    assert (retried["node_id"], retried["pending_reason"]) == ("", "namespace")
    assert_holds_match_jobs(rclient, prefix)


def test_the_lua_agrees_with_find_node_on_a_seeded_mix_of_namespaces(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    """Random labels, asks, namespaces and endings (seeded: the same each run), each submit
    compared with the model fed the state the scripts keep."""
    rng = random.Random(41)
    model: dict[str, NodeRoom] = {}
    served = [{}, {}, TEAM_A, TEAM_B, {"namespace": "team-a.default"}]
    for i in range(7):
        node_id, cpus = f"n{i}", rng.choice([0, 2, 4])
        labels = {**rng.choice(served), "zone": rng.choice(["x", "y"])}
        node(api, node_id, cpus=cpus, **labels)
        every = node_labels(node_id, node_id, labels, vouched=True)
        model[node_id] = NodeRoom(node_id, every, cpus)
    held: dict[str, tuple[str, Ask]] = {}
    for _ in range(80):
        if held and rng.random() < 0.3:  # a job ends: its node's room comes back
            job_id = rng.choice(sorted(held))
            on, ask = held.pop(job_id)
            assert report(api, job_id, "running").status_code == 200
            assert report(api, job_id, "done", exit_code=0).status_code == 200
            model[on] = holding(model[on], ask, -1)
            continue
        selector = rng.choice([{}, {}, {}, {"zone": "x"}, {"node.id": "n2"}])
        namespace = rng.choice([*NAMESPACES, "team-c"])
        ask = Ask(rng.choice([0, 0, 1, 2]), 0, selector, namespace)
        ticket = int(rclient.get(Keys(prefix).rr_seq) or 0) + 1
        expected = find_node(ask, list(model.values()), ticket)
        made = job(api, namespace, cpus=ask.cpus, node_selector=selector)
        assert (made["node_id"] or None, made.get("pending_reason", "")) == expected, ask
        if made["node_id"]:
            model[made["node_id"]] = holding(model[made["node_id"]], ask)
            held[made["job_id"]] = (made["node_id"], ask)
        else:
            assert api.delete(f"/jobs/{made['job_id']}").status_code == 200
    assert_holds_match_jobs(rclient, prefix)


NAMED = {"claims": "named", "status": "pending"}


def test_a_taker_steals_only_the_jobs_it_serves(
    make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    api = make_client(make_settings(node_ttl_secs=600, max_jobs_per_node=2))
    node(api, "s")
    queued = [job(api, NAMESPACES[i % 3]) for i in range(9)]  # all on s, the only node
    node(api, "b", **TEAM_B)
    node(api, "a", **TEAM_A)
    node(api, "t")
    # s's agent takes one now and names its claims: eight are noted as waiting.
    taken_by_s = assert_json(api.get("/jobs", params={"node_id": "s", "capacity": 1, **NAMED}))
    assert [one["job_id"] for one in taken_by_s] == [queued[0]["job_id"]]
    # a (team-a's) takes only team-a's, b only team-b's, past the others' jobs; t (every
    # namespace's) takes the oldest left, whichever namespace.
    took = {}
    for taker in ("a", "b", "t"):
        took[taker] = assert_json(api.get("/jobs", params={"node_id": taker, "status": "pending"}))
        assert {one["taken_from"] for one in took[taker]} == {"s"}
    spaces = {taker: [namespace_of(one) for one in jobs] for taker, jobs in took.items()}
    assert spaces == {"a": ["team-a"] * 2, "b": ["team-b"] * 2, "t": ["", ""]}
    assert_each_on_a_node_serving_it(api, queued)


def test_a_node_labelled_anew_sheds_the_jobs_of_other_namespaces(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "s")
    queued = [job(api, NAMESPACES[i % 3]) for i in range(6)]
    first = queued[0]
    waiter = job(api, after=[first["job_id"]])  # the default's, waiting on s
    delayed = job(api, "team-b", delay_secs=600)
    assert {get(api, one["job_id"])["node_id"] for one in [*queued, waiter, delayed]} == {"s"}
    assert report(api, first["job_id"], "running").status_code == 200
    node(api, "b", **TEAM_B)
    node(api, "t")
    # s's agent restarts labelled for team-a: what it may no longer run leaves its queue;
    # its running job runs on, and team-a's stay.
    node(api, "s", **TEAM_A)
    for one in [*queued[1:], waiter, delayed]:
        after = get(api, one["job_id"])
        expected = "s" if namespace_of(one) == "team-a" else ""
        assert after["node_id"] == expected, one["job_id"]
    assert get(api, first["job_id"])["node_id"] == "s"
    store.run(ops.upkeep.place_unplaced(time.time()))
    assert_each_on_a_node_serving_it(api, [*queued[1:], waiter, delayed])
    assert {get(api, one["job_id"])["node_id"] for one in queued[1:] if not namespace_of(one)} == {
        "t"
    }
    # Registered again with the same label: nothing moves.
    node(api, "s", **TEAM_A)
    assert_each_on_a_node_serving_it(api, queued[1:])
    # The default's job it ran fails with a retry left: not again on s, which no longer
    # serves it, but placed by the next pass.
    assert report(api, first["job_id"], "failed", exit_code=1).status_code == 200
    retried = get(api, first["job_id"])
    assert (retried["status"], retried["node_id"], retried["retry_count"]) == ("pending", "", 1)
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [first["job_id"]]
    assert get(api, first["job_id"])["node_id"] == "t"
    assert_holds_match_jobs(rclient, prefix)


def test_a_node_id_handed_to_a_new_holder_moves_its_jobs_only_where_they_may_run(
    make_client: ClientFactory, make_settings: SettingsFactory, store: SyncJobStore
) -> None:
    key = "namespace-nodes-admin-key-0123456789"
    admin = {"Authorization": f"Bearer {key}"}
    api = make_client(make_settings(node_ttl_secs=TTL, api_key=key))
    body = {"hostname": "h", "cpu_count": 2, "role": "compute"}

    def registered(node_id: str, **labels: str) -> None:
        sent = {**body, "id": node_id, "labels": labels}
        assert api.post("/nodes/register", json=sent, headers=admin).status_code == 201

    registered("a", **TEAM_A)
    made = [
        assert_json(
            api.post("/jobs", json={"command": "x", "namespace": "team-a"}, headers=admin), 201
        )
        for _ in range(3)
    ]
    registered("b", **TEAM_B)
    registered("a", **TEAM_A)  # the key registers the id again: a new holder
    for one in made:
        assert assert_json(api.get(f"/jobs/{one['job_id']}", headers=admin))["node_id"] == ""
    assert len(store.run(ops.upkeep.place_unplaced(time.time()))) == 3
    for one in made:
        assert assert_json(api.get(f"/jobs/{one['job_id']}", headers=admin))["node_id"] == "a"


def test_the_placement_pass_counts_the_nodes_a_plain_job_may_walk_past(
    api: TestClient, store: SyncJobStore
) -> None:
    """Nodes of other namespaces idle at the head of the load index: each plain job's walk
    may pass all of them, so a pass's call places fewer such jobs (units.lua placing_units),
    and the next calls go on."""
    for i in range(60):
        node(api, f"x{i}", namespace="team-x")
    waiting = [job(api)["job_id"] for _ in range(40)]
    node(api, "s")
    first = store.run(ops.upkeep.place_unplaced(time.time(), calls=1))
    assert 0 < len(first) < len(waiting)
    rest = store.run(ops.upkeep.place_unplaced(time.time()))
    assert sorted(first + rest) == sorted(waiting)
    assert {get(api, job_id)["node_id"] for job_id in waiting} == {"s"}

"""Placement against a real Redis (docs/GUIDE.md, Placement): resources, labels, naming a node, the
spread, each pending_reason, and an unplaced job placed once room appears (a job ending, a
node registering or coming back, an undrain), with what every node holds checked against
the jobs after each scenario. The pure rules' tables are tests/nodes/test_fit.py's."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.labels import node_labels
from scheduler.nodes.placement import Ask, NodeRoom, find_node
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    Json,
    SettingsFactory,
    assert_text_error,
    last_heard,
    report,
    submit,
)
from tests.snapshot_helpers import lose_redis_data

TTL = 30.0
HELD = ("pending", "running", "cancelling")


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=TTL, max_job_retries=0)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def node(api: TestClient, node_id: str, cpus: int = 0, memory_mb: int = 0, **labels: str) -> None:
    body = {
        "id": node_id,
        "hostname": f"host-{node_id}",
        "cpu_count": cpus,
        "role": "compute",
        "memory_mb": memory_mb,
        "labels": labels,
    }
    assert api.post("/nodes/register", json=body).status_code == 201


def job(api: TestClient, **fields: Any) -> dict[str, Any]:
    return submit(api, command="sleep 1", **fields)


def get(api: TestClient, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"/jobs/{job_id}").json()
    return found


def poll(api: TestClient, node_id: str) -> list[str]:
    answer = api.get("/jobs", params={"node_id": node_id, "status": "pending"})
    return [j["job_id"] for j in answer.json()]


def finish(api: TestClient, job_id: str) -> None:
    assert report(api, job_id, "running").status_code == 200
    assert report(api, job_id, "done", exit_code=0).status_code == 200


def drain(api: TestClient, node_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = api.post(f"/nodes/{node_id}/drain").json()
    return answer


def undrain(api: TestClient, node_id: str) -> None:
    assert api.post(f"/nodes/{node_id}/undrain").json()["undrained"] is True


def assert_holds_match_jobs(rclient: redis.Redis, prefix: str) -> None:
    """What each node holds (its held set, its room's held cpus and memory, its load) is
    what the jobs bound to it and not ended ask; the unplaced index is the pending jobs on
    no node."""
    keys = Keys(prefix)
    held: dict[str, set[str]] = defaultdict(set)
    cpus: dict[str, int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    unplaced = set()

    for status in HELD:
        for raw in rclient.zrange(keys.status(status), 0, -1):
            record = json.loads(rclient.get(keys.job(raw.decode())))
            if record["node_id"] == "":
                unplaced.add(record["job_id"])
                continue
            held[record["node_id"]].add(record["job_id"])
            cpus[record["node_id"]] += record.get("cpus", 0)
            memory[record["node_id"]] += record.get("memory_mb", 0)
    assert {m.decode() for m in rclient.zrange(keys.unplaced, 0, -1)} == unplaced
    loads = {m.decode(): int(s) for m, s in rclient.zrange(keys.nodes_load, 0, -1, withscores=True)}
    for node_id in set(held) | {n.decode() for n in rclient.hkeys(keys.nodes)}:
        room = {k.decode(): int(v) for k, v in rclient.hgetall(keys.node_room(node_id)).items()}
        assert {m.decode() for m in rclient.smembers(keys.node_held(node_id))} == held[node_id]
        assert room.get("held_cpus", 0) == cpus[node_id], node_id
        assert room.get("held_memory_mb", 0) == memory[node_id], node_id
        for what, held_sum in (("cpus", cpus[node_id]), ("memory_mb", memory[node_id])):
            offered = rclient.zscore(keys.nodes_offer(what), node_id)
            if offered is not None:  # its free room is what it offers less what it holds
                assert rclient.zscore(keys.nodes_free(what), node_id) == offered - held_sum
        if node_id in loads:
            assert loads[node_id] == len(held[node_id]), node_id


def test_a_job_goes_only_to_a_node_with_room(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "a", cpus=4, memory_mb=1000)
    node(api, "b", cpus=2)  # no memory sent (the Rust agent): memory is not checked
    big = job(api, cpus=3)
    assert big["node_id"] == "a"
    assert job(api, cpus=2)["node_id"] == "b"  # a has 1 cpu left
    full = job(api, cpus=2)
    assert (full["node_id"], full["status"], full["pending_reason"]) == ("", "pending", "full")
    assert job(api, cpus=5)["pending_reason"] == "no_fit"
    assert job(api, memory_mb=2000)["node_id"] == "b"  # unknown memory: not checked
    assert_holds_match_jobs(rclient, prefix)
    # The big job ends: its room is free, and the next pass places the waiting one there.
    finish(api, big["job_id"])
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [full["job_id"]]
    placed = get(api, full["job_id"])
    assert (placed["node_id"], placed["status"]) == ("a", "pending")
    assert "pending_reason" not in placed
    assert poll(api, "a") == [full["job_id"]]
    assert not rclient.exists(Keys(prefix).unplaced_retry)  # the pass ended
    assert_holds_match_jobs(rclient, prefix)


def test_labels_and_naming_a_node(api: TestClient, rclient: redis.Redis, prefix: str) -> None:
    node(api, "a", zone="x")
    node(api, "b", zone="y")
    node(api, "c", zone="y", gpu="1")
    assert job(api, node_selector={"zone": ["x", "y"], "gpu": "1"})["node_id"] == "c"
    assert job(api, node_selector={"zone": "y"})["node_id"] == "b"  # c holds one already
    assert {job(api, node_selector={"zone": "y"})["node_id"] for _ in range(2)} == {"b", "c"}
    assert job(api, node_selector={"node.id": "a"})["node_id"] == "a"
    assert job(api, node_selector={"node.hostname": "host-b"})["node_id"] == "b"
    assert job(api, node_selector={"zone": "z"})["pending_reason"] == "no_fit"
    # A node's labels change with its registration.
    node(api, "a", zone="z")
    assert job(api, node_selector={"zone": "x"})["pending_reason"] == "no_fit"
    assert job(api, node_selector={"zone": "z"})["node_id"] == "a"
    nodes = api.get("/nodes").json()
    assert nodes["a"]["labels"] == {"zone": "z"}
    assert (nodes["c"]["labels"], nodes["c"]["memory_mb"]) == ({"zone": "y", "gpu": "1"}, 0)
    assert_holds_match_jobs(rclient, prefix)


def test_a_busy_node_collects_no_backlog(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    """A slow node holding jobs its agent has not taken gets no more until the others hold
    as many (round-robin gave it one in three)."""
    for node_id in "abc":
        node(api, node_id)
    for _ in range(6):
        job(api, node_selector={"node.id": "a"})  # a's agent is slow: they stay pending
    placed = [job(api)["node_id"] for _ in range(12)]
    assert sorted(placed) == ["b"] * 6 + ["c"] * 6
    assert sorted(job(api)["node_id"] for _ in range(3)) == ["a", "b", "c"]
    assert_holds_match_jobs(rclient, prefix)


def test_each_pending_reason(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str, settings: Settings
) -> None:
    # No node at all: a job asking nothing is the original's 503; one asking waits.
    assert_text_error(api.post("/jobs", json={"command": "x"}), 503, "no healthy compute nodes")
    assert job(api, cpus=1)["pending_reason"] == "no_nodes"
    node(api, "a", cpus=2)
    node(api, "b", cpus=1)
    # The only node that fits is drained: it waits, and so does a plain job.
    drain(api, "a")
    drain(api, "b")
    assert job(api, cpus=2)["pending_reason"] == "drained"
    assert job(api)["pending_reason"] == "drained"
    undrain(api, "b")
    assert job(api, cpus=2)["pending_reason"] == "drained"  # b is too small anyway
    assert job(api, cpus=1)["node_id"] == "b"
    assert job(api, cpus=1)["pending_reason"] == "full"
    assert job(api, cpus=3)["pending_reason"] == "no_fit"
    # A node that no longer heartbeats is not live: nothing fits it.
    last_heard(rclient, settings, "b", time.time() - TTL - 1)
    last_heard(rclient, settings, "a", time.time() - TTL - 1)
    assert job(api, cpus=1)["pending_reason"] == "no_nodes"
    last_heard(rclient, settings, "b", time.time())
    assert job(api, node_selector={"node.id": "a"})["pending_reason"] == "no_fit"
    assert_holds_match_jobs(rclient, prefix)


def test_a_node_registering_or_coming_back_places_waiting_jobs(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str, settings: Settings
) -> None:
    waiting = job(api, cpus=1)["job_id"]
    assert store.run(ops.upkeep.place_unplaced(time.time())) == []  # no pass is due: nothing read
    node(api, "a", cpus=2)
    assert rclient.get(Keys(prefix).unplaced_retry) == b"-inf"
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [waiting]
    assert poll(api, "a") == [waiting]
    # a falls silent; a job for it waits; its heartbeat brings it back.
    last_heard(rclient, settings, "a", time.time() - TTL - 1)
    later = job(api, node_selector={"node.id": "a"})["job_id"]
    assert get(api, later)["pending_reason"] == "no_nodes"
    assert api.post("/nodes/heartbeat", json={"id": "a"}).status_code == 200
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [later]
    assert get(api, later)["node_id"] == "a"
    assert_holds_match_jobs(rclient, prefix)


def test_an_undrain_places_waiting_jobs_and_a_drain_moves_them(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "a", cpus=2)
    node(api, "b", cpus=1)
    on_a = [job(api, cpus=2)["job_id"], job(api, node_selector={"node.id": "a"})["job_id"]]
    plain = job(api)["job_id"]
    assert [get(api, j)["node_id"] for j in (*on_a, plain)] == ["a", "a", "b"]
    answer = drain(api, "a")
    assert (answer["moved"], answer["unplaced"], answer["stayed"]) == (0, 2, 0)  # none fits
    assert [get(api, j)["pending_reason"] for j in on_a] == ["drained", "drained"]
    assert poll(api, "a") == []
    assert_holds_match_jobs(rclient, prefix)
    undrain(api, "a")
    assert sorted(store.run(ops.upkeep.place_unplaced(time.time()))) == sorted(on_a)
    assert [get(api, j)["node_id"] for j in on_a] == ["a", "a"]
    assert_holds_match_jobs(rclient, prefix)


def test_a_drained_nodes_jobs_go_to_nodes_that_fit(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "a", cpus=8, zone="x")
    zoned = job(api, cpus=1, node_selector={"zone": "x"})["job_id"]
    big = [job(api, cpus=2)["job_id"] for _ in range(2)]
    plain = job(api)["job_id"]
    node(api, "b", cpus=1, zone="y")
    node(api, "c", cpus=1, zone="x")
    answer = drain(api, "a")
    assert (answer["moved"], answer["unplaced"], answer["stayed"]) == (2, 2, 0)
    # The zoned job to the one other node of its zone; the plain one to the least loaded.
    assert [get(api, j)["node_id"] for j in (zoned, *big, plain)] == ["c", "", "", "b"]
    # Only a offers 2 cpus (the second big job's ask is not looked for again: same reason).
    assert [get(api, j)["pending_reason"] for j in big] == ["drained", "drained"]
    assert_holds_match_jobs(rclient, prefix)


def test_an_unplaced_job_is_not_claimed_and_is_cancelled(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    waiting = job(api, memory_mb=64)
    assert (waiting["node_id"], waiting["pending_reason"]) == ("", "no_nodes")
    claim = report(api, waiting["job_id"], "running")
    assert_text_error(claim, 409, "job is not placed on a node yet")
    cancelled = api.delete(f"/jobs/{waiting['job_id']}").json()
    assert (cancelled["status"], cancelled["failure_reason"]) == ("failed", "cancelled")
    assert "pending_reason" not in cancelled
    assert rclient.zcard(Keys(prefix).unplaced) == 0
    assert_holds_match_jobs(rclient, prefix)


def test_retries_delays_and_waits_are_placed_by_fit(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    node(api, "a", cpus=1)
    first = job(api, cpus=1)["job_id"]
    after = job(api, cpus=1, after=[first])
    assert (after["status"], after["node_id"]) == ("waiting", "")  # placed when its wait ends
    delayed = job(api, cpus=1, delay_secs=0.5)
    assert (delayed["status"], delayed["node_id"]) == ("delayed", "")
    finish(api, first)  # a is free; the waiter now waits unplaced for the pass
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [after["job_id"]]
    assert store.run(ops.upkeep.promote_due(time.time() + 1)) == [delayed["job_id"]]
    assert get(api, delayed["job_id"])["pending_reason"] == "full"
    assert report(api, after["job_id"], "running").status_code == 200
    assert report(api, after["job_id"], "failed", exit_code=1).status_code == 200
    # Retried by hand: placed as a new job is, here on the room the failure gave back.
    retried = api.post(f"/jobs/{after['job_id']}/retry").json()
    assert (retried["status"], retried["node_id"]) == ("pending", "a")
    assert store.run(ops.upkeep.place_unplaced(time.time())) == []  # the delayed one: still no room
    assert_holds_match_jobs(rclient, prefix)


def holding(room: NodeRoom, ask: Ask, jobs: int = 1) -> NodeRoom:
    """`room` once `jobs` more jobs asking `ask` are held there (-1: one given back)."""
    return dataclasses.replace(
        room,
        held_cpus=room.held_cpus + jobs * ask.cpus,
        held_memory_mb=room.held_memory_mb + jobs * ask.memory_mb,
        held_jobs=room.held_jobs + jobs,
    )


def submit_as_modelled(
    api: TestClient, rclient: redis.Redis, prefix: str, model: dict[str, NodeRoom], ask: Ask
) -> Json:
    """Submits a job asking `ask`, checks the scripts placed it where find_node says (with
    the ticket the submit draws), and holds it in `model` as the scripts did."""
    ticket = int(rclient.get(Keys(prefix).rr_seq) or 0) + 1
    expected = find_node(ask, list(model.values()), ticket)
    fields = {"cpus": ask.cpus, "memory_mb": ask.memory_mb, "node_selector": ask.node_selector}
    made = job(api, **fields)
    assert (made["node_id"] or None, made.get("pending_reason", "")) == expected, ask
    if made["node_id"]:
        model[made["node_id"]] = holding(model[made["node_id"]], ask)
    return made


def test_the_lua_agrees_with_find_node(api: TestClient, rclient: redis.Redis, prefix: str) -> None:
    offers = {"a": (4, 1000, {"zone": "x"}), "b": (8, 0, {"zone": "y"}), "c": (0, 0, {"zone": "x"})}
    for node_id, (cpus, memory, labels) in offers.items():
        node(api, node_id, cpus=cpus, memory_mb=memory, **labels)
    model = {
        node_id: NodeRoom(
            node_id, node_labels(node_id, f"host-{node_id}", labels, vouched=True), cpus, memory
        )
        for node_id, (cpus, memory, labels) in offers.items()
    }
    asks = [
        Ask(),
        Ask(cpus=3),
        Ask(cpus=3),
        Ask(cpus=6, memory_mb=10),
        Ask(memory_mb=900),
        Ask(memory_mb=200, node_selector={"zone": "x"}),
        Ask(cpus=9),
        Ask(cpus=2, node_selector={"zone": ["x", "y"]}),
        Ask(node_selector={"node.id": "b"}),
        Ask(),
        Ask(cpus=1, memory_mb=1),
        Ask(node_selector={"zone": "q"}),
    ]
    for ask in asks:
        submit_as_modelled(api, rclient, prefix, model, ask)
    assert_holds_match_jobs(rclient, prefix)


def test_a_restore_rebuilds_holds_and_the_unplaced_jobs(
    make_client: ClientFactory,
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
    prefix: str,
) -> None:
    api = make_client(settings)
    node(api, "a", cpus=2, zone="x")
    held = job(api, cpus=2, node_selector={"zone": "x"})
    waiting = job(api, cpus=1)
    assert waiting["pending_reason"] == "full"
    assert snapshot_once(settings) == 2
    lose_redis_data(rclient, prefix)
    assert restore_if_empty(settings) is True
    restarted = make_client(settings)
    assert get(restarted, held["job_id"]) == held
    assert get(restarted, waiting["job_id"]) == waiting
    assert_holds_match_jobs(rclient, prefix)
    node(restarted, "a", cpus=2, zone="x")  # the node registers again after the loss
    assert store.run(ops.upkeep.place_unplaced(time.time())) == []  # a still holds the first
    finish(restarted, held["job_id"])
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [waiting["job_id"]]
    assert_holds_match_jobs(rclient, prefix)


def test_a_node_registered_before_placement_by_fit_is_indexed_at_its_heartbeat(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    """An upgrade: the node's record is there, but not what placement reads of it."""
    keys = Keys(prefix)
    node(api, "a", cpus=2, zone="x")
    rclient.delete(keys.nodes_load, keys.node_room("a"), *rclient.keys(keys.label_nodes("*")))
    assert api.post("/nodes/heartbeat", json={"id": "a"}).status_code == 200
    assert rclient.zscore(keys.nodes_load, "a") == 0
    assert job(api, cpus=2, node_selector={"zone": "x"})["node_id"] == "a"
    assert job(api, cpus=1)["pending_reason"] == "full"
    assert_holds_match_jobs(rclient, prefix)


def test_the_lua_agrees_with_find_node_on_a_seeded_mix(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    """Random offers, labels, asks and endings (seeded: the same each run), each submit
    compared with the model fed the state the scripts keep."""
    import random

    rng = random.Random(24)
    model: dict[str, NodeRoom] = {}
    for i in range(6):
        node_id, cpus, memory = f"n{i}", rng.choice([0, 2, 4, 8]), rng.choice([0, 512, 2048])
        zone = rng.choice(["a", "b"])
        node(api, node_id, cpus=cpus, memory_mb=memory, zone=zone)
        labels = node_labels(node_id, f"host-{node_id}", {"zone": zone}, vouched=True)
        model[node_id] = NodeRoom(node_id, labels, cpus, memory)
    held: dict[str, tuple[str, Ask]] = {}
    for _ in range(60):
        if held and rng.random() < 0.3:  # a job ends: its node's room comes back
            job_id = rng.choice(sorted(held))
            on, ask = held.pop(job_id)
            finish(api, job_id)
            model[on] = holding(model[on], ask, -1)
            continue
        selector = rng.choice([{}, {}, {"zone": "a"}, {"zone": ["a", "b"]}, {"node.id": "n2"}])
        ask = Ask(rng.choice([0, 0, 1, 2, 3]), rng.choice([0, 0, 256, 1024]), selector)
        made = submit_as_modelled(api, rclient, prefix, model, ask)
        if made["node_id"]:
            held[made["job_id"]] = (made["node_id"], ask)
        else:
            assert api.delete(f"/jobs/{made['job_id']}").status_code == 200
    assert_holds_match_jobs(rclient, prefix)

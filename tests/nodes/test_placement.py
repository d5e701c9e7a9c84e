"""Placement: the pure rules (placement.py) and the create script's Lua copy of them, which
must agree; spread over the built-in registry's nodes, shared with GET /schedule. The fit
rules' tables are test_fit.py's."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from scheduler.models.registry import NodeStatus
from scheduler.nodes.placement import (
    NoHealthyNodes,
    choose,
    healthy_compute_nodes,
    least_loaded,
    live_node_ids,
)
from tests.conftest import ClientFactory, assert_json, register, report, submit


@pytest.mark.parametrize(
    "candidates, ticket, expected",
    [
        (["a"], 1, "a"),
        (["a"], 7, "a"),
        (["a", "b", "c"], 1, "a"),
        (["a", "b", "c"], 2, "b"),
        (["a", "b", "c"], 3, "c"),
        (["a", "b", "c"], 4, "a"),
        (["a", "b", "c"], 3001, "a"),
        (["a", "b"], 0, "b"),
    ],
)
def test_choose(candidates: list[str], ticket: int, expected: str) -> None:
    assert choose(candidates, ticket) == expected


def test_choose_without_candidates() -> None:
    with pytest.raises(NoHealthyNodes) as err:
        choose([], 1)
    assert str(err.value) == "no healthy compute nodes"


def test_choose_visits_every_node_once_per_round() -> None:
    nodes = [f"n{i}" for i in range(5)]
    for start in (1, 3, 99):
        assert sorted(choose(nodes, t) for t in range(start, start + 5)) == nodes


@pytest.mark.parametrize(
    "nodes, expected",
    [
        ({}, []),
        ({"b": ("compute", "healthy"), "a": ("compute", "healthy")}, ["a", "b"]),
        ({"a": ("compute", "unhealthy"), "b": ("compute", "healthy")}, ["b"]),
        ({"a": ("storage", "healthy"), "b": ("", "healthy")}, ["b"]),
        ({"a": ("compute", ""), "b": ("compute", "Healthy")}, []),
        ({"n10": ("compute", "healthy"), "n9": ("compute", "healthy")}, ["n10", "n9"]),
    ],
)
def test_healthy_compute_nodes(nodes: dict[str, tuple[str, str]], expected: list[str]) -> None:
    statuses = {k: NodeStatus(id=k, role=role, status=st) for k, (role, st) in nodes.items()}
    assert healthy_compute_nodes(statuses) == expected


@pytest.mark.parametrize(
    "last_seen, now, ttl, expected",
    [
        ({}, 100.0, 30.0, []),
        ({"b": 90.0, "a": 95.0}, 100.0, 30.0, ["a", "b"]),
        ({"a": 70.0, "b": 69.999}, 100.0, 30.0, ["a"]),  # exactly ttl old is still live
        ({"a": 100.0}, 100.0, 1.0, ["a"]),
        ({"a": 101.0}, 100.0, 1.0, ["a"]),  # a clock a little ahead
        ({"a": 0.0}, 100.0, 1.0, []),
    ],
)
def test_live_node_ids(
    last_seen: dict[str, float], now: float, ttl: float, expected: list[str]
) -> None:
    assert live_node_ids(last_seen, now, ttl) == expected


# The Lua placement against placement.least_loaded: the least loaded node, one of the ties
# (which one is drawn at random: not promised).


def placed_as_modelled(placed: list[str], node_ids: list[str], holds: list[bool]) -> None:
    """Each node in `placed` was one of the least loaded then (least_loaded), the loads
    counting the placements before it that hold their node (a job; GET /schedule holds
    none), with nothing ending between."""
    loads = dict.fromkeys(node_ids, 0)
    for step, (node, held) in enumerate(zip(placed, holds, strict=True)):
        assert node in least_loaded(loads), (step, node, loads)
        loads[node] += held


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_lua_placement_agrees_with_least_loaded(make_client: ClientFactory, count: int) -> None:
    api = make_client()
    node_ids = [f"node-{c}" for c in "qazxsw"[:count]]
    register(api, *node_ids)  # registered out of order on purpose
    placed = [submit(api, command=f"c{i}")["node_id"] for i in range(3 * count + 1)]
    placed_as_modelled(placed, node_ids, [True] * len(placed))


def test_schedule_answers_a_least_loaded_node(make_client: ClientFactory) -> None:
    api = make_client()
    node_ids = ["n3", "n1", "n2", "n10"]
    register(api, *node_ids)
    seen = []
    for i in range(8):
        if i % 3 == 1:
            seen.append(assert_json(api.get("/schedule"))["node_id"])
        else:
            seen.append(submit(api, command=f"c{i}")["node_id"])
    placed_as_modelled(seen, node_ids, [i % 3 != 1 for i in range(8)])


def test_ties_are_spread_over_every_tied_node(make_client: ClientFactory) -> None:
    """Jobs that end before the next comes leave every node tied: each placement draws one
    of them, so all of them get work (how many each is not promised)."""
    api = make_client()
    node_ids = [f"n{i}" for i in range(3)]
    register(api, *node_ids)
    placed = set()
    for _ in range(60):  # a node missed 60 times in a row: (2/3)^60, about 3e-11
        job = submit(api, command="x")
        placed.add(job["node_id"])
        assert_json(report(api, job["job_id"], "running", node_id=job["node_id"]))
        assert_json(report(api, job["job_id"], "done", node_id=job["node_id"], exit_code=0))
    assert placed == set(node_ids)


def test_round_robin_hits_each_node_once_per_round(make_client: ClientFactory) -> None:
    api = make_client()
    node_ids = [f"n{i}" for i in range(7)]
    register(api, *node_ids)
    for _ in range(2):
        placed = [submit(api, command="x")["node_id"] for _ in node_ids]
        assert sorted(placed) == sorted(node_ids)


def test_a_failed_placement_leaves_nothing_behind(client: TestClient) -> None:
    assert client.get("/schedule").status_code == 503
    assert client.post("/jobs", json={"command": "x"}).status_code == 503
    register(client, "b", "a")
    assert sorted(submit(client, command="x")["node_id"] for _ in range(2)) == ["a", "b"]


def test_new_nodes_join_the_spread(client: TestClient) -> None:
    register(client, "a")
    assert submit(client, command="x")["node_id"] == "a"
    register(client, "b")
    assert submit(client, command="x")["node_id"] == "b"  # the least loaded
    assert sorted(submit(client, command="x")["node_id"] for _ in range(2)) == ["a", "b"]

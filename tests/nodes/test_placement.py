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
    live_node_ids,
    spread,
)
from tests.conftest import ClientFactory, assert_json, register, submit


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


# The Lua placement against placement.spread: the least loaded node, ties round-robin.


def spread_model(node_ids: list[str], plan: list[bool]) -> list[str]:
    """Where placement.spread sends each step of `plan` (True: a job, which then holds its
    node; False: GET /schedule, which only draws a ticket), with nothing ending between."""
    loads = dict.fromkeys(node_ids, 0)
    seen = []
    for ticket, holds in enumerate(plan, start=1):
        node = spread(loads, ticket)
        loads[node] += holds
        seen.append(node)
    return seen


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_lua_placement_agrees_with_spread(make_client: ClientFactory, count: int) -> None:
    api = make_client()
    node_ids = [f"node-{c}" for c in "qazxsw"[:count]]
    register(api, *node_ids)  # registered out of order on purpose
    placed = [submit(api, command=f"c{i}")["node_id"] for i in range(3 * count + 1)]
    assert placed == spread_model(node_ids, [True] * len(placed))


def test_schedule_advances_the_same_counter(make_client: ClientFactory) -> None:
    api = make_client()
    node_ids = ["n3", "n1", "n2", "n10"]
    register(api, *node_ids)
    seen = []
    for i in range(8):
        if i % 3 == 1:
            seen.append(assert_json(api.get("/schedule"))["node_id"])
        else:
            seen.append(submit(api, command=f"c{i}")["node_id"])
    assert seen == spread_model(node_ids, [i % 3 != 1 for i in range(8)])


def test_round_robin_hits_each_node_once_per_round(make_client: ClientFactory) -> None:
    api = make_client()
    node_ids = [f"n{i}" for i in range(7)]
    register(api, *node_ids)
    for _ in range(2):
        placed = [submit(api, command="x")["node_id"] for _ in node_ids]
        assert sorted(placed) == sorted(node_ids)


def test_failed_placement_does_not_use_a_ticket(client: TestClient) -> None:
    assert client.get("/schedule").status_code == 503
    assert client.post("/jobs", json={"command": "x"}).status_code == 503
    register(client, "b", "a")
    assert [submit(client, command="x")["node_id"] for _ in range(2)] == ["a", "b"]


def test_new_nodes_join_the_rotation(client: TestClient) -> None:
    register(client, "a")
    assert submit(client, command="x")["node_id"] == "a"  # ticket 1
    register(client, "b")
    # ticket 2 over [a, b] -> b, ticket 3 -> a
    assert [submit(client, command="x")["node_id"] for _ in range(2)] == ["b", "a"]

"""A job that asks nothing goes to the least loaded live node, turning among the ties
(place.lua least_loaded, docs/GUIDE.md, Placement), on a real Redis: the ties are counted in
the first nodes read (LOAD_HEAD) unless all of those tie, where they are counted apart. Each
case is a fleet's loads and how many plain jobs are submitted; the jobs must go to the least
loaded nodes, never twice to one while another as little loaded is left, whatever side of
LOAD_HEAD the ties fall."""

from __future__ import annotations

from collections import Counter

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.store.keys import Keys
from tests.store.test_placement_store import api, assert_holds_match_jobs, job, node, settings

__all__ = ["api", "settings"]  # the fixtures, imported


def loaded_fleet(api: TestClient, loads: list[int]) -> list[str]:
    """Nodes n00, n01... holding `loads[i]` jobs each (submitted while only it was live)."""
    ids = [f"n{i:02}" for i in range(len(loads))]
    for node_id, load in zip(ids, loads, strict=True):
        node(api, node_id)
        for _ in range(load):
            assert job(api, node_selector={"node.id": node_id})["node_id"] == node_id
    return ids


@pytest.mark.parametrize(
    ("loads", "jobs"),
    [
        ([0, 0, 0], 6),  # fewer ties than LOAD_HEAD: each turn once, then again
        ([1, 0, 1, 0, 1], 2),  # the ties among loaded nodes
        ([0] * 8, 8),  # exactly LOAD_HEAD tie: counted apart
        ([0] * 20, 20),  # more than LOAD_HEAD tie: every one, each once
        ([0] * 12 + [1] * 5, 12),
        ([2] * 9 + [0] * 3, 3),  # the least loaded sort first whatever their ids
        ([1] * 10 + [0] * 9, 9),
    ],
)
def test_plain_jobs_go_to_the_least_loaded_turning_among_ties(
    api: TestClient, rclient: redis.Redis, prefix: str, loads: list[int], jobs: int
) -> None:
    ids = loaded_fleet(api, loads)
    low = min(loads)
    ties = [node_id for node_id, load in zip(ids, loads, strict=True) if load == low]
    placed = Counter(job(api)["node_id"] for _ in range(jobs))
    rounds, rest = divmod(jobs, len(ties))
    spread = [rounds + 1] * rest + [rounds] * (len(ties) - rest)
    assert set(placed) <= set(ties)
    assert sorted(placed.values(), reverse=True) == [count for count in spread if count]
    assert_holds_match_jobs(rclient, prefix)


def test_a_dead_node_in_the_first_read_is_passed_over(
    api: TestClient, rclient: redis.Redis, prefix: str
) -> None:
    """A node of nodes:load no longer live leaves it when picked, and the job goes on."""
    ids = loaded_fleet(api, [0] * 10)
    keys = Keys(prefix)
    for node_id in ids[:9]:
        rclient.zadd(keys.nodes_compute, {node_id: 1.0})  # last heard long ago
    assert {job(api)["node_id"] for _ in range(3)} == {ids[9]}
    assert ids[9].encode() in rclient.zrange(keys.nodes_load, 0, -1)

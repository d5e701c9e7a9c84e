"""Several API processes on one Redis: ids stay unique and round-robin stays fair."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from itertools import cycle

import httpx
import pytest

from tests.processes import api_replicas, post_json_many, scheduler_env

NODES = ["node-a", "node-b", "node-c", "node-d"]


@pytest.fixture
def replicas(redis_url: str, prefix: str) -> Iterator[list[str]]:
    env = scheduler_env(redis_url, prefix, MAX_JOBS_PER_NODE="10000", NODE_TTL_SECS="600")
    with api_replicas(3, env) as urls:
        for node in NODES:
            body = {"id": node, "hostname": node, "cpu_count": 1, "role": "compute"}
            assert httpx.post(f"{urls[0]}/nodes/register", json=body).status_code == 201
        yield urls


def test_n_submissions_over_n_nodes_hit_each_node_once(replicas: list[str]) -> None:
    urls = cycle(replicas)
    nodes = [
        httpx.post(f"{next(urls)}/jobs", json={"command": f"echo {i}"}).json()["node_id"]
        for i in range(len(NODES))
    ]
    assert sorted(nodes) == NODES


def test_concurrent_submissions_get_distinct_ids_and_fair_nodes(replicas: list[str]) -> None:
    total = 10_000
    bodies = [json.dumps({"command": f"echo {i}"}).encode() for i in range(total)]
    answers = asyncio.run(post_json_many(replicas, "/jobs", bodies, connections=60))
    assert {status for status, _ in answers} == {201}
    jobs = [json.loads(body) for _, body in answers]

    ids = {job["job_id"] for job in jobs}
    assert len(ids) == total
    assert ids == {f"job-{n}" for n in range(1, total + 1)}
    per_node = Counter(job["node_id"] for job in jobs)
    assert per_node == dict.fromkeys(NODES, total // len(NODES))
    # The store agrees with what the API answered: every node's queue holds its jobs.
    for node in NODES:
        listed = httpx.get(
            f"{replicas[1]}/jobs", params={"node_id": node, "limit": 10_000}, timeout=30
        ).json()
        assert {job["job_id"] for job in listed} == {
            job["job_id"] for job in jobs if job["node_id"] == node
        }

"""The API of a deployment of SCHEDULER_SHARDS=3 (store/jobs.py) as its users see it: jobs
spread over the shards and each lives on its own, the listing, counts and metrics cover every
shard, replays and dependencies find their shard, and nodes and services of any shard answer.
Nothing here assumes which ids a shard draws: each test reads the shard from the id
(Layout) or the node (node_shard), and finds the records under that shard's prefix. The
upgrade, an unreachable Redis and the UI are in test_shards_start.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.job import job_number
from scheduler.store.keys import Keys
from scheduler.store.shards import Layout, node_shard
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    Json,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)

SHARDS = 3
LAYOUT = Layout(SHARDS)  # a deployment sharded from its first start: no floor


def shard_nodes(shard: int, count: int = 1) -> list[str]:
    """The first `count` ids n1, n2, ... that belong to `shard`."""
    found = (f"n{i}" for i in range(1, 1000) if node_shard(f"n{i}", SHARDS) == shard)
    return [next(found) for _ in range(count)]


def by_number(job_ids: Any) -> list[str]:
    return sorted(job_ids, key=lambda job_id: job_number(job_id) or 0)


def shard_keys(settings: Settings) -> list[Keys]:
    return [Keys(settings.for_shard(k).redis_prefix) for k in range(SHARDS)]


def stored(rclient: redis.Redis, settings: Settings) -> list[set[str]]:
    """Each shard's jobs, as its own index holds them."""
    return [{m.decode() for m in rclient.zrange(k.all_jobs, 0, -1)} for k in shard_keys(settings)]


def holders(rclient: redis.Redis, settings: Settings, job_id: str) -> list[int]:
    """The shards whose prefix holds the record of `job_id`."""
    keys = shard_keys(settings)
    return [k for k in range(SHARDS) if rclient.exists(keys[k].job(job_id))]


def listed(api: TestClient, query: str = "") -> list[str]:
    return [job["job_id"] for job in assert_json(api.get(f"/jobs{query}"))]


def polled(api: TestClient, node_id: str) -> list[str]:
    """What the node's agent is offered: its poll (GET /jobs?node_id=&status=pending)."""
    return listed(api, f"?node_id={node_id}&status=pending")


def scrape(api: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = api.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


@dataclass
class Deployment:
    api: TestClient
    settings: Settings
    nodes: dict[int, list[str]]  # each shard's registered compute nodes

    @property
    def all_nodes(self) -> list[str]:
        return [n for shard in self.nodes.values() for n in shard]


@pytest.fixture
def sharded(make_client: ClientFactory, make_settings: SettingsFactory) -> Deployment:
    """A three-shard deployment with one compute node on each shard, two on shard 2."""
    settings = make_settings(shards=SHARDS, max_jobs_per_node=10, max_job_retries=0)
    api = make_client(settings)
    nodes = {0: shard_nodes(0), 1: shard_nodes(1), 2: shard_nodes(2, 2)}
    register(api, *(n for shard in nodes.values() for n in shard))
    return Deployment(api, settings, nodes)


def submitted(dep: Deployment, count: int) -> list[Json]:
    """`count` new jobs, each checked on a node of its own shard."""
    jobs = [submit(dep.api, command=f"echo {i}") for i in range(count)]
    for job in jobs:
        assert node_shard(job["node_id"], SHARDS) == LAYOUT.job_shard(job["job_id"]), job
    return jobs


@BOTH_FRONTS
def test_jobs_spread_over_the_shards_and_live_each_on_its_own(
    sharded: Deployment, rclient: redis.Redis
) -> None:
    api = sharded.api
    jobs = submitted(sharded, 9)
    ids = [job["job_id"] for job in jobs]
    assert len(set(ids)) == 9
    assert {LAYOUT.job_shard(job_id) for job_id in ids} == {0, 1, 2}
    offers = {node: polled(api, node) for node in sharded.all_nodes}
    for job in jobs:  # offered to its own node's poll and to no other
        assert [n for n, got in offers.items() if job["job_id"] in got] == [job["node_id"]]
    for job in jobs:
        assert assert_json(report(api, job["job_id"], "running"))["status"] == "running"
        done = assert_json(report(api, job["job_id"], "done", exit_code=0, stdout="ok"))
        assert (done["status"], done["node_id"]) == ("done", job["node_id"])
    for job in jobs:
        found = assert_json(api.get(f"/jobs/{job['job_id']}"))
        assert (found["status"], found["exit_code"], found["stdout"]) == ("done", 0, "ok")
        assert holders(rclient, sharded.settings, job["job_id"]) == [
            LAYOUT.job_shard(job["job_id"])
        ]
    per_shard = stored(rclient, sharded.settings)
    assert [len(jobs) for jobs in per_shard] == [3, 3, 3]  # in turn over the live shards
    assert set().union(*per_shard) == set(ids)


@pytest.fixture
def mixed(sharded: Deployment) -> dict[str, Json]:
    """Twelve jobs over the shards: every third running, one of each shard's done, one
    failed, the rest pending. The jobs as GET /jobs/{id} should answer them, by id."""
    api, jobs = sharded.api, submitted(sharded, 12)
    for i, job in enumerate(jobs):
        if i % 3 == 0 or i in (1, 2, 4):
            report(api, job["job_id"], "running")
        if i in (1, 2, 4):
            ending = {1: "done", 2: "failed", 4: "done"}[i]
            report(api, job["job_id"], ending, exit_code=0 if ending == "done" else 1)
    return {job["job_id"]: assert_json(api.get(f"/jobs/{job['job_id']}")) for job in jobs}


def walk(api: TestClient, limit: int, newest: bool) -> list[str]:
    """Every page of GET /jobs, `limit` a page, from the first on, as a client pages."""
    order, bound = ("&order=newest", "before") if newest else ("", "after")
    seen = listed(api, f"?limit={limit}{order}")
    while page := listed(api, f"?limit={limit}{order}&{bound}={seen[-1]}"):
        assert len(page) <= limit
        seen += page
    return seen


@BOTH_FRONTS
def test_the_listing_merges_every_shard_in_job_number_order(
    sharded: Deployment, mixed: dict[str, Json]
) -> None:
    api, oldest = sharded.api, by_number(mixed)
    assert {LAYOUT.job_shard(job_id) for job_id in oldest} == {0, 1, 2}
    assert listed(api) == listed(api, "?order=oldest") == oldest
    assert listed(api, "?order=newest") == oldest[::-1]
    for limit in (1, 2, 5):
        assert walk(api, limit, newest=False) == oldest
        assert walk(api, limit, newest=True) == oldest[::-1]
    assert listed(api, f"?after={oldest[3]}&limit=4") == oldest[4:8]
    assert listed(api, f"?order=newest&before={oldest[8]}&limit=3") == oldest[7:4:-1]
    for status in ("pending", "running", "done", "failed"):
        want = [j for j in oldest if mixed[j]["status"] == status]
        assert want and listed(api, f"?status={status}") == want, status
        assert listed(api, f"?status={status}&order=newest") == want[::-1]
    for node in sharded.all_nodes:  # a node's listing is its shard's, not its poll
        want = [j for j in oldest if mixed[j]["node_id"] == node]
        assert listed(api, f"?node_id={node}") == want
        running = [j for j in want if mixed[j]["status"] == "running"]
        assert listed(api, f"?node_id={node}&status=running") == running


@BOTH_FRONTS
def test_the_metrics_count_every_shards_jobs_and_nodes(
    sharded: Deployment, mixed: dict[str, Json]
) -> None:
    metrics = scrape(sharded.api)
    statuses = [job["status"] for job in mixed.values()]
    for status in ("pending", "running", "done", "failed"):
        assert metrics[("scheduler_jobs", (("status", status),))] == statuses.count(status)
    for node in sharded.all_nodes:
        for status in ("pending", "running"):
            mine = [j for j in mixed.values() if (j["node_id"], j["status"]) == (node, status)]
            key = ("scheduler_node_jobs", (("node", node), ("status", status)))
            assert metrics[key] == len(mine), (node, status)
        assert metrics[("scheduler_node_healthy", (("node", node),))] == 1


@BOTH_FRONTS
def test_an_idempotency_key_finds_its_job_on_whichever_shard(
    sharded: Deployment, rclient: redis.Redis
) -> None:
    api, body = sharded.api, {"command": "echo once"}
    made = {}
    for i in range(9):  # keys enough for every shard to hold some
        key = {"Idempotency-Key": f"order-{i}"}
        made[key["Idempotency-Key"]] = assert_json(api.post("/jobs", json=body, headers=key), 201)
    assert {LAYOUT.job_shard(job["job_id"]) for job in made.values()} == {0, 1, 2}
    before = stored(rclient, sharded.settings)
    for key, job in made.items():
        again = api.post("/jobs", json=body, headers={"Idempotency-Key": key})
        assert assert_json(again, 200) == job
        other = api.post("/jobs", json={"command": "echo twice"}, headers={"Idempotency-Key": key})
        assert_text_error(other, 422, "Idempotency-Key already used with another request")
    assert stored(rclient, sharded.settings) == before
    assert sum(map(len, before)) == 9


@BOTH_FRONTS
def test_a_replay_finds_its_job_after_its_keys_shard_gains_a_node(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """A key whose own shard had no live node made its job on another; a replay after a node
    joined that shard (the client retrying across the join) still answers that job."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    register(api, *shard_nodes(1), *shard_nodes(2))
    body = {"command": "echo once"}
    made = {}
    for i in range(9):
        key = {"Idempotency-Key": f"retry-{i}"}
        made[f"retry-{i}"] = assert_json(api.post("/jobs", json=body, headers=key), 201)
    register(api, *shard_nodes(0))
    before = stored(rclient, settings)
    for key, job in made.items():
        again = api.post("/jobs", json=body, headers={"Idempotency-Key": key})
        assert (again.status_code, again.json()["job_id"]) == (200, job["job_id"]), key
    assert stored(rclient, settings) == before


@BOTH_FRONTS
def test_a_job_runs_after_others_on_their_shard(sharded: Deployment, rclient: redis.Redis) -> None:
    api, jobs = sharded.api, submitted(sharded, 6)
    home: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for job in jobs:
        home[LAYOUT.job_shard(job["job_id"])].append(job["job_id"])
    for shard, deps in home.items():
        later = submit(api, command="later", after=deps)
        assert LAYOUT.job_shard(later["job_id"]) == shard, (later, deps)
        assert node_shard(later["node_id"], SHARDS) == shard
        assert later["status"] == "waiting"
    first, second = home[2]
    waiting = submit(api, command="after one", after=[first])
    assert_json(report(api, first, "running"))
    assert_json(report(api, first, "done", exit_code=0))
    assert assert_json(api.get(f"/jobs/{waiting['job_id']}"))["status"] == "pending"
    assert waiting["job_id"] in polled(api, waiting["node_id"])

    before = stored(rclient, sharded.settings)
    for mixed in ([home[0][0], home[1][0]], [second, home[0][1], home[1][1]]):
        refused = api.post("/jobs", json={"command": "x", "after": mixed})
        assert refused.status_code == 400 and refused.text.startswith("after"), refused.text
    assert stored(rclient, sharded.settings) == before


def test_nodes_of_every_shard_are_listed_and_answer(
    sharded: Deployment, rclient: redis.Redis
) -> None:
    api, keys = sharded.api, shard_keys(sharded.settings)
    assert set(assert_json(api.get("/nodes"))) == set(sharded.all_nodes)
    for shard, nodes in sharded.nodes.items():
        for node in nodes:
            assert [k for k in range(SHARDS) if rclient.hexists(keys[k].nodes, node)] == [shard]
    node, other = sharded.nodes[2]
    beat = assert_json(api.post("/nodes/heartbeat", json={"id": node}))
    assert (beat["id"], beat["status"]) == (node, "healthy")

    answer = assert_json(api.post(f"/nodes/{node}/drain"))
    assert (answer["drained"], answer["drained_by"]) == (True, "operator")
    assert node not in {job["node_id"] for job in submitted(sharded, 6)}
    assert assert_json(api.get("/nodes"))[node]["drained"] is True
    assert assert_json(api.post(f"/nodes/{node}/undrain"))["undrained"] is True
    assert "drained" not in assert_json(api.get("/nodes"))[node]

    queued = [job for job in submitted(sharded, 12) if job["node_id"] == node]
    assert queued, "the undrained node got none of shard 2's new jobs"
    assert api.delete(f"/nodes/{node}").status_code == 204
    assert set(assert_json(api.get("/nodes"))) == set(sharded.all_nodes) - {node}
    offered = polled(api, other)
    for job in queued:  # its pending jobs are the other shard-2 node's now
        moved = assert_json(api.get(f"/jobs/{job['job_id']}"))
        assert (moved["status"], moved["node_id"]) == ("pending", other)
        assert job["job_id"] in offered


def test_max_nodes_bounds_the_deployments_nodes_not_each_shards(
    make_client: ClientFactory,
) -> None:
    api = make_client(shards=SHARDS, max_nodes=3)
    first = [shard_nodes(k)[0] for k in range(SHARDS)]
    register(api, *first)
    late = shard_nodes(1, 2)[1]  # its shard holds one node: it was let in, the fourth
    body = {"id": late, "hostname": late, "cpu_count": 2, "role": "compute"}
    assert_text_error(
        api.post("/nodes/register", json=body), 503, "too many nodes registered (MAX_NODES)"
    )
    register(api, *first)  # known ids may always register again
    assert api.delete(f"/nodes/{first[0]}").status_code == 204
    register(api, late)
    assert set(assert_json(api.get("/nodes"))) == {*first[1:], late}


def test_services_of_every_shards_nodes(sharded: Deployment) -> None:
    api, made = sharded.api, {}
    for node in sharded.all_nodes * 2:
        service = assert_json(api.post("/services", json={"node_id": node, "port": 8080}), 201)
        number = job_number("job-" + service["id"].removeprefix("svc-"))
        assert number is not None and number % SHARDS == node_shard(node, SHARDS), service
        made[service["id"]] = service
    assert len(made) == 2 * len(sharded.all_nodes)
    in_id_order = sorted(made, key=lambda sid: int(sid.removeprefix("svc-")))
    assert [s["id"] for s in assert_json(api.get("/services"))] == in_id_order  # as one shard
    for node in sharded.all_nodes:
        mine = {s["id"] for s in assert_json(api.get(f"/services?node_id={node}"))}
        assert mine == {sid for sid, s in made.items() if s["node_id"] == node}
    for sid, service in made.items():
        assert assert_json(api.get(f"/services/{sid}")) == service
        assert api.patch(f"/services/{sid}", json={"status": "crashed"}).status_code == 204
        assert assert_json(api.get(f"/services/{sid}"))["status"] == "crashed"
    crashed = {s["id"] for s in assert_json(api.get("/services?status=crashed"))}
    assert crashed == set(made)
    assert api.get("/services/svc-99999").status_code == 404

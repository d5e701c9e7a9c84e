"""The product on a real Redis Cluster of three primaries (tests/redis_cluster.py).

Every key of a deployment carries the hash tag `{REDIS_PREFIX}`, so the whole deployment
lives in one slot; the connections find the primary that owns it and follow it when the slot
moves. Each test picks a prefix whose slot a chosen primary owns, so routing to each of the
three is exercised, not only to the first seed."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis.crc import key_slot

from tests.conftest import ClientFactory, CtxFactory, assert_json, register, report, submit
from tests.fakes import FakeSNS, eventually
from tests.processes import scheduler_env, wait_http
from tests.redis_cluster import Cluster, ClusterNode, redis_cluster
from tests.redis_server import free_port
from tests.test_faults import Fleet
from workers import tasks

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with redis_cluster() as c:
        yield c


def slot_of(prefix: str) -> int:
    return key_slot(f"{{{prefix}}}".encode())


def prefix_owned_by(cluster: Cluster, node: ClusterNode) -> str:
    for _ in range(10_000):
        prefix = f"t{uuid.uuid4().hex[:10]}"
        if cluster.owner(slot_of(prefix)) == node:
            return prefix
    raise AssertionError(f"no prefix found for {node}")


def deployment_keys(node: ClusterNode, prefix: str) -> list[bytes]:
    return list(node.client().scan_iter(match=f"*{prefix}*", count=1000))


def snapshot_statuses(path: str) -> set[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return set(conn.execute("SELECT id, status FROM jobs"))


def assert_in_one_slot_on(cluster: Cluster, owner: ClusterNode, prefix: str) -> None:
    """Every key of the deployment is on `owner`, in the deployment's slot; none elsewhere."""
    keys = deployment_keys(owner, prefix)
    assert len(keys) > 10
    assert {key_slot(key) for key in keys} == {slot_of(prefix)}, keys
    for other in cluster.nodes:
        if other != owner:
            assert deployment_keys(other, prefix) == []


@pytest.mark.parametrize("primary", [0, 1, 2])
def test_a_job_goes_from_submit_to_done_on_the_primary_owning_the_slot(
    cluster: Cluster, make_client: ClientFactory, make_ctx: CtxFactory, primary: int
) -> None:
    owner = cluster.nodes[primary]
    prefix = prefix_owned_by(cluster, owner)
    api = make_client(redis_url=cluster.url, redis_prefix=prefix)
    register(api, "n1")
    job = submit(api, command="echo hello", env_vars={"A": "1"})
    polled = assert_json(api.get("/jobs", params={"node_id": "n1", "status": "pending"}))
    assert [j["job_id"] for j in polled] == [job["job_id"]]
    assert report(api, job["job_id"], "running").status_code == 200
    assert report(api, job["job_id"], "done", exit_code=0, stdout="hello").status_code == 200
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "done"
    other = submit(api, command="sleep 100")
    assert api.delete(f"/jobs/{other['job_id']}").status_code == 200
    listed = assert_json(api.get("/jobs"))
    assert [(j["job_id"], j["status"]) for j in listed] == [
        (job["job_id"], "done"),
        (other["job_id"], "failed"),
    ]
    # The workers' side (redis-py, sync): a sweep, the snapshot and the outbox.
    make_ctx(redis_url=cluster.url, redis_prefix=prefix)
    tasks.sweep(1)
    assert tasks.snapshot(1) == 2
    assert_in_one_slot_on(cluster, owner, prefix)


def test_a_cluster_asking_for_a_password_runs_a_job_and_refuses_a_wrong_one(
    make_client: ClientFactory, make_ctx: CtxFactory
) -> None:
    with redis_cluster(password="cl:uster@pw") as guarded:
        owner = guarded.nodes[1]
        prefix = prefix_owned_by(guarded, owner)
        api = make_client(redis_url=guarded.url, redis_prefix=prefix)
        register(api, "n1")
        job = submit(api, command="echo hello")
        assert report(api, job["job_id"], "running").status_code == 200
        assert report(api, job["job_id"], "done", exit_code=0).status_code == 200
        make_ctx(redis_url=guarded.url, redis_prefix=prefix)
        assert tasks.snapshot(1) == 1
        assert_in_one_slot_on(guarded, owner, prefix)
        wrong = guarded.url.replace("cl%3Auster%40pw", "wrong")
        assert wrong != guarded.url
        refused = make_client(redis_url=wrong, redis_prefix=prefix).get(f"/jobs/{job['job_id']}")
        assert (refused.status_code, refused.text) == (503, "store unavailable\n")


def test_the_api_and_the_workers_follow_the_slot_to_another_primary(
    cluster: Cluster, make_client: ClientFactory, make_ctx: CtxFactory
) -> None:
    owner = cluster.nodes[0]
    prefix = prefix_owned_by(cluster, owner)
    api = make_client(redis_url=cluster.url, redis_prefix=prefix)
    register(api, "n1")
    first = submit(api, command="echo 1")
    ctx = make_ctx(redis_url=cluster.url, redis_prefix=prefix)
    assert tasks.snapshot(1) == 1

    target = cluster.nodes[1]
    cluster.move_slot(slot_of(prefix), target)

    # The connection learns of the move from a MOVED reply: at most that request is refused
    # (503, never 500); the following ones reach the new owner.
    statuses = [api.get(f"/jobs/{first['job_id']}").status_code for _ in range(3)]
    assert statuses[-1] == 200 and set(statuses) <= {200, 503}, statuses
    second = submit(api, command="echo 2")
    assert second["job_id"] == "job-2"
    assert report(api, second["job_id"], "running").status_code == 200

    def snapshot_written() -> bool:
        # The worker context's connection still points at the old owner: its first call
        # after the move fails as a lost connection would (the worker retries it).
        with contextlib.suppress(redis.ConnectionError):
            tasks.snapshot(2)
        return ("job-2", "running") in snapshot_statuses(ctx.settings.scheduler_db)

    eventually(snapshot_written, timeout=10)
    assert_in_one_slot_on(cluster, target, prefix)


def test_serve_and_worker_processes_run_a_job_and_publish_its_event_on_a_cluster(
    cluster: Cluster, tmp_path: Path
) -> None:
    owner = cluster.nodes[2]
    prefix = prefix_owned_by(cluster, owner)
    with FakeSNS() as sns:
        env = scheduler_env(
            cluster.url,
            prefix,
            SNS_URL=sns.url,
            OUTBOX_FLUSH_SECS="0.2",
            SCHEDULER_DB=str(tmp_path / "snap.db"),
        )
        fleet = Fleet(env, tmp_path)
        url = f"http://127.0.0.1:{free_port()}"
        try:
            fleet.start("api", "serve", "--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1])
            fleet.start("worker", "worker")
            wait_http(f"{url}/health")
            done = _run_one_job(url)
            eventually(lambda: done in {e["job_id"] for e in sns.events()}, timeout=30)
        finally:
            fleet.stop_all()
        assert fleet.alive() == {"api": False, "worker": False}
    rq_keys = [key for key in deployment_keys(owner, prefix) if b":rq:" in key]
    assert rq_keys, "rq keeps its queues and jobs under the deployment's tag"
    assert_in_one_slot_on(cluster, owner, prefix)
    assert (tmp_path / "api.log").read_text().count("Traceback") == 0


def _run_one_job(url: str) -> str:
    body: dict[str, Any] = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
    assert httpx.post(f"{url}/nodes/register", json=body).status_code == 201
    job_id: str = httpx.post(f"{url}/jobs", json={"command": "echo hi"}).json()["job_id"]
    for status in ("running", "done"):
        answer = httpx.patch(f"{url}/jobs/{job_id}", json={"status": status, "exit_code": 0})
        assert answer.status_code == 200, answer.text
    return job_id

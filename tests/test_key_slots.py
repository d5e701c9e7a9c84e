"""Every key a deployment creates lies in one Redis Cluster slot, the slot of its hash tag
"{REDIS_PREFIX}" (store/keys.py), rq's keys included: a scenario through the API and a real
worker process, then a SCAN of the whole test Redis for the deployment's keys."""

from __future__ import annotations

import redis
from redis.crc import key_slot

from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, assert_json
from tests.fakes import FakeSNS, ending_number
from tests.keys import API_KEY as KEY
from tests.processes import scheduler_env, worker_burst

OPERATOR = {"Authorization": f"Bearer {KEY}"}


def test_every_key_of_a_deployment_is_in_the_slot_of_its_tag(
    make_client: ClientFactory,
    rclient: redis.Redis,
    redis_url: str,
    prefix: str,
    sns: FakeSNS,
) -> None:
    api = make_client(
        api_key=KEY, agent_auth="token", sns_url=sns.url, max_jobs_per_node=3, max_job_retries=0
    )
    node = {"id": "n1", "hostname": "n1", "role": "compute", "cpu_count": 2}
    token = assert_json(api.post("/nodes/register", json=node, headers=OPERATOR), 201)["token"]
    agent = {"Authorization": f"Bearer {token}"}
    jobs = [
        assert_json(api.post("/jobs", json={"command": c}, headers=OPERATOR), 201)["job_id"]
        for c in ("one", "two", "three")
    ]
    polled = assert_json(api.get("/jobs?node_id=n1&status=pending", headers=agent))
    assert {job["job_id"] for job in polled} == set(jobs)
    for job_id, status in zip(jobs, ("done", "failed", "running"), strict=True):
        assert api.patch(f"/jobs/{job_id}", json={"status": "running"}, headers=agent).is_success
        if status != "running":
            body = {"status": status, "exit_code": 0 if status == "done" else 1}
            assert api.patch(f"/jobs/{job_id}", json=body, headers=agent).is_success
    assert api.delete(f"/jobs/{jobs[2]}", headers=OPERATOR).is_success  # cancelling, running
    service = {"node_id": "n1", "port": 80}
    assert assert_json(api.post("/services", json=service, headers=agent), 201)["id"] == "svc-1"
    # A real worker: outbox -> rq -> SNS, the timeout sweep, the SQLite snapshot.
    env = scheduler_env(redis_url, prefix, SNS_URL=sns.url, TINYAWS_API_KEY=KEY)
    worker_burst(env)
    assert len(sns.events()) == 2

    keys = Keys(prefix)
    ours = sorted(
        k.decode() for k in rclient.scan_iter(match="*", count=1000) if prefix in k.decode()
    )
    slot = key_slot(keys.tag.encode())
    assert [k for k in ours if key_slot(k.encode()) != slot] == []
    # The scenario did make the keys checked, rq's among them.
    for expected in (
        keys.job(jobs[0]),
        keys.node_jobs("n1"),
        keys.node_busy("n1"),
        keys.cancelling,
        keys.event_seq,
        keys.nodes_seen,
        keys.tokens,
        keys.node_services("n1"),
        keys.initialised,
        keys.runs("snapshot"),
        keys.rq_key("job", keys.rq_job_id("event", ending_number(rclient, keys, jobs[0]))),
        keys.events,
        keys.rq_key("finished", keys.rq_queue("events")),
        keys.rq_queues,
    ):
        assert expected in ours, (expected, ours)
    assert any(k.startswith(keys.rq_key("worker", "")) for k in ours), ours
    # The channels the scripts publish on are named the same way.
    assert key_slot(keys.node_channel("n1").encode()) == key_slot(keys.job_channel("x").encode())
    assert key_slot(keys.job_channel("x").encode()) == slot

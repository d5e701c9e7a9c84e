"""The scripts keep a job where the table says (store/scripts/places.py PLACES): after a
create, each transition, placement, a retry and a restore (over the job itself, and into an
empty deployment), a job in any status, on a node or on none, is in exactly the indexes of
its row."""

from __future__ import annotations

import time

import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.db import restored_job, row_from_record
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts.snapshot import rebuild_waiting, restore_jobs
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, assert_json, register, report, submit
from tests.places import expected, place_of

NOWHERE = {"zone": "nowhere"}  # a selector no node matches: the job waits unplaced


def running(client: TestClient, **fields: object) -> str:
    job_id: str = submit(client, command="x", **fields)["job_id"]
    assert report(client, job_id, "running").status_code == 200
    return job_id


def jobs_in_every_place(client: TestClient) -> list[str]:
    """Jobs in each status the API reaches, on a node and on none."""
    register(client, "a")
    dep = submit(client, command="dep")["job_id"]
    cancelling = running(client)
    assert client.delete(f"/jobs/{cancelling}").json()["status"] == "cancelling"
    done = running(client)
    assert report(client, done, "done", exit_code=0).status_code == 200
    failed = running(client, max_retries=0)
    assert report(client, failed, "failed", exit_code=1).status_code == 200
    retried = running(client, max_retries=0)
    assert report(client, retried, "failed", exit_code=1).status_code == 200
    assert client.post(f"/jobs/{retried}/retry").status_code == 200
    unplaced_ended = submit(client, command="x", node_selector=NOWHERE)["job_id"]
    assert client.delete(f"/jobs/{unplaced_ended}").status_code == 200
    return [
        dep,
        submit(client, command="x", node_selector=NOWHERE)["job_id"],  # pending, unplaced
        submit(client, command="x", delay_secs=100)["job_id"],  # delayed on a
        submit(client, command="x", delay_secs=100, cpus=1)["job_id"],  # delayed, unplaced
        submit(client, command="x", after=[dep])["job_id"],  # waiting on a
        submit(client, command="x", after=[dep], cpus=1)["job_id"],  # waiting, unplaced
        running(client),
        running(client, job_type="service"),
        cancelling,
        done,
        failed,
        retried,
        unplaced_ended,
    ]


def assert_in_place(client: TestClient, rclient: redis.Redis, keys: Keys, job_id: str) -> None:
    job = assert_json(client.get(f"/jobs/{job_id}"))
    want = expected(keys, job["status"], job["node_id"], service=job.get("job_type") == "service")
    assert place_of(rclient, keys, job_id) == want, (job["status"], job["node_id"])


def test_the_scripts_keep_a_job_in_exactly_its_place(
    make_settings: SettingsFactory,
    make_client: ClientFactory,
    rclient: redis.Redis,
    store: SyncJobStore,
) -> None:
    settings: Settings = make_settings(max_jobs_per_node=10)
    client = make_client(settings)
    keys = Keys(settings.redis_prefix)
    job_ids = jobs_in_every_place(client)
    statuses = {assert_json(client.get(f"/jobs/{j}"))["status"] for j in job_ids}
    assert statuses == {"pending", "delayed", "waiting", "running", "cancelling", "done", "failed"}
    for job_id in job_ids:
        assert_in_place(client, rclient, keys, job_id)
    # Restored over themselves: out of their old place, into the same one again.
    records = [client.get(f"/jobs/{job_id}").content for job_id in job_ids]
    restored = [restored_job(row_from_record(record), time.time()) for record in records]
    assert store.run(restore_jobs(restored, mark_dirty=False)) == len(job_ids)
    # A waiting job's count, as a start does after a restore.
    store.run(ops.upkeep.rebuild_waiting(time.time()))
    for job_id in job_ids:
        assert_in_place(client, rclient, keys, job_id)
    # Into a deployment that holds none of them.
    empty = Keys(f"{settings.redis_prefix}-empty")
    call = restore_jobs(restored, mark_dirty=False)
    rclient.eval(call.script.text, 1, empty.root, *call.args)
    rebuild = rebuild_waiting(0, 500, time.time())
    rclient.eval(rebuild.script.text, 1, empty.root, *rebuild.args)
    for job_id, record in zip(job_ids, records, strict=True):
        job = assert_json(client.get(f"/jobs/{job_id}"))
        want = expected(empty, job["status"], job["node_id"], service=b'"service"' in record)
        assert place_of(rclient, empty, job_id) == want, (job["status"], job["node_id"])

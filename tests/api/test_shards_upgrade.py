"""The edges of a sharded deployment's ids and keys (store/shard_layout.py, shard_placement.py,
create.py): Idempotency-Keys of before the upgrade, a key no shard could take a job for, a
shard whose counter came back empty, jobs pruned before the upgrade, and a layout read before
shard 0 got its snapshot back."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.restore import restore_if_empty
from scheduler.store.errors import StoreNotReady
from scheduler.store.jobs import JobStore
from scheduler.store.keys import Keys
from scheduler.store.shards import key_order
from tests.api.test_shards import LAYOUT, SHARDS, listed, shard_nodes
from tests.api.test_shards_start import ids_of, snapshot_every_shard
from tests.conftest import (
    ClientFactory,
    SettingsFactory,
    assert_json,
    register,
    report,
    submit,
)
from tests.snapshot_helpers import go_file, lose_redis_data


def numbers(job_ids: list[str]) -> list[int]:
    return [int(job_id.removeprefix("job-")) for job_id in job_ids]


def upgraded(
    make_client: ClientFactory, make_settings: SettingsFactory
) -> tuple[list[str], Settings, TestClient]:
    """job-1 to job-5 made unsharded, then the deployment's API with SHARDS shards and a node
    on each: the old ids, the settings and the client."""
    unsharded = make_client()
    register(unsharded, shard_nodes(0)[0])
    old = [submit(unsharded, command=f"old {i}")["job_id"] for i in range(5)]
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    return old, settings, api


def test_a_replay_of_a_key_used_before_the_upgrade_finds_its_job(
    make_client: ClientFactory, rclient: redis.Redis, make_settings: SettingsFactory
) -> None:
    unsharded = make_client()
    register(unsharded, shard_nodes(0)[0])
    keys = [f"key-{i}" for i in range(12)]
    made = {}
    for key in keys:
        answer = unsharded.post("/jobs", json={"command": key}, headers={"Idempotency-Key": key})
        made[key] = assert_json(answer, 201)["job_id"]
    api = make_client(shards=SHARDS)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    for key in keys:
        again = api.post("/jobs", json={"command": key}, headers={"Idempotency-Key": key})
        assert assert_json(again, 200)["job_id"] == made[key]
    assert sorted(j["job_id"] for j in assert_json(api.get("/jobs"))) == sorted(made.values())


def test_a_key_no_shard_took_a_job_for_is_free_again_once_one_can(
    make_client: ClientFactory,
) -> None:
    api = make_client(shards=SHARDS)
    key, body = "early", {"command": "x"}
    assert api.post("/jobs", json=body, headers={"Idempotency-Key": key}).status_code == 503
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]  # as api/hot.py keeps a key
    first = key_order(f"submit:{digest}", SHARDS)[0]
    register(api, shard_nodes(first)[0])
    made = assert_json(api.post("/jobs", json=body, headers={"Idempotency-Key": key}), 201)
    assert LAYOUT.job_shard(made["job_id"]) == first


def test_a_shard_whose_counter_came_back_empty_draws_above_every_earlier_id(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    old, settings, api = upgraded(make_client, make_settings)
    [submit(api, command=f"a {i}") for i in range(3)]
    # Shard 2's Redis came back empty, with no snapshot file yet: its counter starts over.
    lose_redis_data(rclient, settings.for_shard(2).redis_prefix)
    register(api, shard_nodes(2)[0])
    later = [submit(api, command=f"b {i}")["job_id"] for i in range(6)]
    assert min(numbers(later)) > 5 and not set(later) & set(old)
    for job_id in later:
        assert assert_json(api.get(f"/jobs/{job_id}"))["command"].startswith("b ")


def test_ids_of_jobs_pruned_before_the_upgrade_are_not_made_again(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    unsharded = make_client(settings)
    register(unsharded, shard_nodes(0)[0])
    [submit(unsharded, command=f"old {i}") for i in range(5)]
    keys = Keys(settings.redis_prefix)
    rclient.delete(keys.all_jobs, *(keys.job(f"job-{n}") for n in range(1, 6)))  # pruned
    api = make_client(shards=SHARDS)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    new = [submit(api, command=f"new {i}")["job_id"] for i in range(9)]
    assert min(numbers(new)) > 5


def test_the_layout_is_not_recorded_before_shard_zero_has_its_snapshot_back(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    old, settings, api = upgraded(make_client, make_settings)
    [submit(api, command=f"new {i}") for i in range(6)]
    snapshot_every_shard(settings)
    for shard in range(SHARDS):
        lose_redis_data(rclient, settings.for_shard(shard).redis_prefix)

    async def start() -> JobStore:
        store = JobStore.connect(settings)
        try:
            await store.start()
        finally:
            await store.aclose()
        return store

    with pytest.raises(StoreNotReady):  # shard 0 not restored yet: no floor found in it
        asyncio.run(start())
    assert not rclient.exists(Keys(settings.redis_prefix).shards)
    for shard in range(SHARDS):
        restore_if_empty(settings.for_shard(shard))
    assert asyncio.run(start()).where.layout.floor == 5
    back = make_client(settings)
    for job_id in old:
        assert assert_json(back.get(f"/jobs/{job_id}"))["job_id"] == job_id


def test_an_old_snapshots_rows_that_are_not_job_n_upgrade_too(
    make_client: ClientFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """A Go scheduler's file holds `not-a-job` and job-99, a multiple of 3: the floor's
    search reads past job-99 to the row with no number (it once read its score, 0.5, as an
    int and the sharded start failed), finds no floor, and every job is found where it is."""
    go_file(path := tmp_path / "go.db")
    settings = make_settings(scheduler_db=str(path), shards=SHARDS)
    api = make_client(settings)
    for job_id in ("not-a-job", "job-99"):
        assert assert_json(api.get(f"/jobs/{job_id}"))["job_id"] == job_id
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    new = [submit(api, command=f"new {i}")["job_id"] for i in range(3)]
    assert min(numbers(new)) > 99
    every = [job["job_id"] for job in assert_json(api.get("/jobs"))]
    assert every == ["not-a-job", "job-99", *sorted(new, key=lambda j: numbers([j]))]


def test_a_node_gone_before_the_upgrade_still_lists_the_jobs_it_ran_then(
    make_client: ClientFactory,
) -> None:
    """A node deleted before the upgrade is not kept on shard 0: it registers again on its
    own shard, and its listings (GET /jobs?node_id=, the UI's counts and search) show the
    jobs it ran before, kept on shard 0, as one shard does (they showed its shard's only)."""
    unsharded = make_client()
    node = shard_nodes(1)[0]
    register(unsharded, node)
    old = [submit(unsharded, command=f"old {i}")["job_id"] for i in range(2)]
    for job_id in old:
        assert_json(report(unsharded, job_id, "running"))
        assert_json(report(unsharded, job_id, "done", exit_code=0))
    assert unsharded.delete(f"/nodes/{node}").status_code == 204
    api = make_client(shards=SHARDS)
    register(api, node)
    new = submit(api, command="new")["job_id"]
    assert LAYOUT.job_shard(new) == 1
    assert listed(api, f"?node_id={node}") == [*old, new]
    assert listed(api, f"?node_id={node}&status=done&order=newest") == old[::-1]
    assert listed(api, f"?node_id={node}&status=pending&limit=1") == [new]  # its poll
    page = api.get(f"/ui/jobs?node_id={node}").text
    assert ids_of(page) == [new, *old[::-1]]
    assert "all 3</a>" in page and "done 2</a>" in page and "pending 1</a>" in page
    assert ids_of(api.get(f"/ui/jobs?node_id={node}&q=old").text) == old[::-1]

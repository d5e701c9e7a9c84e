"""A worker of a sharded deployment (SCHEDULER_SHARDS > 1) serves one shard, SCHEDULER_SHARD:
its settings, rq queues, periodic tasks, snapshot file and restore are that shard's
(Settings.for_shard); SQS ingestion and schedules run on shard 0's workers alone."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from scheduler.config import Settings
from scheduler.config.shards import shard_prefixes
from scheduler.models.job import JobCreate, new_job
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement
from scheduler.snapshot.restore import restore_if_empty
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import SettingsFactory, last_heard
from tests.processes import scheduler_env
from tests.snapshot_helpers import lose_redis_data, rows
from workers import context, queues, tasks
from workers.rq_prefix import wanted_rq_prefix
from workers.schedule import Trigger, periodic_tasks, redis_time
from workers.worker import restore_snapshot

EVERY_SHARD = {"sweep", "outbox", "snapshot", "promote"}


@pytest.fixture
def deployment(make_settings: SettingsFactory) -> Settings:
    """The settings every process of a two-shard deployment reads (its worker's: shard 1)."""
    return make_settings(shards=2, shard=1, sqs_url="http://127.0.0.1:1", node_lost_secs=60)


def make_jobs(settings: Settings, count: int) -> list[str]:
    """`count` jobs made on the shard of `settings`, pending on node "a"."""
    job = new_job(JobCreate(command="echo"), rfc3339(time.time()))
    store = SyncJobStore.connect(settings)
    try:
        # As a starting serve or worker would: the restore question is settled first.
        store.run(snapshot_scripts.finish_restore(0, "test"))
        made = [
            store.run(ops.jobs.create(job, Placement.fixed("a"), time.time())).job
            for _ in range(count)
        ]
    finally:
        store.close()
    return [json.loads(head)["job_id"] for head in made]


def test_a_workers_settings_are_its_shards(deployment: Settings, prefix: str, db: Path) -> None:
    served = deployment.served()
    assert served.redis_prefix == shard_prefixes(prefix, 2)[1] != prefix
    assert served.scheduler_db == str(db.with_name("scheduler-1.db"))
    assert (served.shard, served.shards) == (1, 2)
    first = dataclasses.replace(deployment, shard=0).served()
    assert (first.redis_prefix, first.scheduler_db) == (prefix, str(db))


def test_unsharded_settings_are_served_as_they_are(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    assert settings.served() == settings


def test_the_rq_prefix_is_the_served_shards() -> None:
    env = {"REDIS_PREFIX": "eu", "SCHEDULER_SHARDS": "3", "SCHEDULER_SHARD": "2"}
    assert wanted_rq_prefix(env) == f"{{{shard_prefixes('eu', 3)[2]}}}:rq"
    assert wanted_rq_prefix({**env, "SCHEDULER_SHARD": ""}) == "{eu}:rq"


def test_ingestion_and_schedules_are_shard_zeros(deployment: Settings) -> None:
    zero = dataclasses.replace(deployment, shard=0).served()
    one = deployment.served()
    assert {t.name for t in periodic_tasks(zero)} == EVERY_SHARD | {"sqs", "schedules"}
    assert {t.name for t in periodic_tasks(one)} == EVERY_SHARD


def test_a_shard_ones_trigger_fires_on_its_own_queue(
    deployment: Settings, rclient: redis.Redis, prefix: str
) -> None:
    served = deployment.served()
    trigger = Trigger(rclient, served)
    try:
        now = redis_time(rclient)
        trigger.tick(now)
    finally:
        trigger.stop()
    keys = Keys(served.redis_prefix)
    fired = {t.name: keys.rq_job_id(t.name, int(now // t.interval)) for t in trigger.tasks}
    assert set(fired) == EVERY_SHARD
    assert set(queues.queue(rclient, served, queues.PERIODIC).job_ids) == set(fired.values())
    base = dataclasses.replace(deployment, shard=0, shards=1)
    assert queues.queue(rclient, base, queues.PERIODIC).job_ids == []


def test_a_shard_ones_sweep_and_snapshot_handle_its_jobs(
    deployment: Settings, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    served = deployment.served()
    made = make_jobs(served, 2)
    assert made == ["job-3", "job-5"]  # shard 1 of 2 draws the odd numbers
    now = time.time()
    last_heard(rclient, served, "a", now - 600)  # lost
    last_heard(rclient, served, "b", now)
    context.configure(served)
    try:
        tasks.sweep(period=1)
        assert tasks.snapshot(period=1) == 2
    finally:
        context.close()
    snapshot = rows(db.with_name("scheduler-1.db"))
    assert sorted(snapshot) == made
    assert {row["node_id"] for row in snapshot.values()} == {"b"}  # moved off the lost node
    assert not db.exists()
    assert not list(rclient.scan_iter(Keys(prefix).pattern()))  # shard 0 untouched


def test_a_shard_restores_from_its_own_file(
    deployment: Settings, rclient: redis.Redis, db: Path
) -> None:
    served = deployment.served()
    made = make_jobs(served, 2)
    context.configure(served)
    try:
        tasks.snapshot(period=1)
    finally:
        context.close()
    lose_redis_data(rclient, served.redis_prefix)

    restore_snapshot(served)

    keys = Keys(served.redis_prefix)
    assert sorted(j.decode() for j in rclient.zrange(keys.all_jobs, 0, -1)) == made
    later = make_jobs(served, 1)[0]
    assert int(later.removeprefix("job-")) > 5 and int(later.removeprefix("job-")) % 2 == 1


def test_a_shards_counter_is_not_mistaken_for_lost_data(
    deployment: Settings, rclient: redis.Redis
) -> None:
    """Shard 1's counter of 2 has made job-5: a snapshot holding job-5 is no sign that Redis
    lost data (which a restore must refuse) when the start-up marker is missing."""
    served = deployment.served()
    make_jobs(served, 2)
    context.configure(served)
    try:
        tasks.snapshot(period=1)
    finally:
        context.close()
    rclient.delete(Keys(served.redis_prefix).initialised)

    assert restore_if_empty(served) is False
    assert rclient.exists(Keys(served.redis_prefix).initialised)


@pytest.mark.parametrize("given", [{"SCHEDULER_SHARD": "1"}, {}])
def test_the_worker_command_serves_the_shard_it_is_given(
    given: dict[str, str],
    deployment: Settings,
    redis_url: str,
    prefix: str,
    db: Path,
    rclient: redis.Redis,
) -> None:
    """The shard in the environment, or in --shard."""
    served = deployment.served()
    made = make_jobs(served, 1)
    env = scheduler_env(redis_url, prefix, SCHEDULER_SHARDS="2", SCHEDULER_DB=str(db), **given)
    done = _worker(env, "--burst", *([] if given else ["--shard", "1"]))
    assert done.returncode == 0, done.stderr
    assert sorted(rows(db.with_name("scheduler-1.db"))) == made
    assert not db.exists()
    rq_keys = {k.decode() for k in rclient.scan_iter(f"{{{served.redis_prefix}}}:rq:*")}
    assert Keys(served.redis_prefix).rq_queues in rq_keys


def test_a_shard_beyond_the_deployments_is_refused(redis_url: str, prefix: str) -> None:
    env = scheduler_env(redis_url, prefix, SCHEDULER_SHARDS="2")
    done = _worker(env, "--burst", "--shard", "2")
    assert done.returncode == 2
    assert "SCHEDULER_SHARD: 2 is not below SCHEDULER_SHARDS (2)" in done.stderr


@pytest.mark.parametrize("count", ["1", "3"])
def test_a_worker_of_another_shard_count_is_refused_before_it_restores(
    count: str, redis_url: str, prefix: str, db: Path, rclient: redis.Redis
) -> None:
    rclient.hset(Keys(prefix).shards, "count", "2")  # as a 2-shard deployment's start records
    env = scheduler_env(redis_url, prefix, SCHEDULER_SHARDS=count, SCHEDULER_DB=str(db))
    done = _worker(env, "--burst")
    assert done.returncode == 2
    assert f"SCHEDULER_SHARDS is {count}, but this deployment was started with 2" in done.stderr
    assert "Traceback" not in done.stderr
    assert not rclient.exists(Keys(prefix).initialised)  # no restore question settled


def _worker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", "worker", *args],
        env=env,
        cwd=os.path.dirname(env["SCHEDULER_DB"]),
        capture_output=True,
        text=True,
        timeout=120,
    )

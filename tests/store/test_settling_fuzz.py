"""Random graphs and random operations between the pieces of their endings' settling (issue
36, finding 5 review): submits after random jobs (some 130 at once after one, more than a
request's piece), cancels, done and failed reports, retries by hand one by one and in
bulk, snapshots, restores and settle calls of a few units, in a seeded order. After each
few steps and at the end, what every job's state must be whatever the interleaving:
- a job pending, running or done has every job it runs after done;
- a waiting job is in {P}:waiting and only those; once all is settled its count is the
  number of its dependencies not done, and none of them failed;
- each ending has its one event (as many events as attempts recorded), and no ending is
  left to settle at the end."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.restore import restore_from_file, restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts.settling import settle_endings
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report
from tests.snapshot_helpers import lose_redis_data


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=10_000, max_job_retries=0)


class Run:
    """The jobs made and what each runs after; whether events still match attempts (a
    restore brings jobs back without either)."""

    def __init__(self, api: TestClient, store: SyncJobStore, rclient: redis.Redis) -> None:
        self.api, self.store, self.rclient = api, store, rclient
        self.keys = Keys(store.settings.redis_prefix)
        self.after: dict[str, list[str]] = {}
        self.restored = False

    @property
    def jobs(self) -> list[str]:
        return list(self.after)

    def some(self, rnd: random.Random, status: str) -> str:
        """A job in `status` most times (any job else, or when none is)."""
        index = self.keys.status(status)
        if rnd.random() < 0.8 and self.rclient.zcard(index):
            picked = self.rclient.zrandmember(index)
            if picked is not None and picked.decode() in self.after:
                return str(picked.decode())
        return rnd.choice(self.jobs)

    def submit(self, deps: list[str], count: int = 1) -> None:
        for _ in range(count):
            made = self.api.post("/jobs", json={"command": "x", "after": deps})
            if made.status_code == 201:
                self.after[made.json()["job_id"]] = deps

    def run(self, job_id: str, status: str) -> None:
        if report(self.api, job_id, "running").status_code == 200:
            assert report(self.api, job_id, status, exit_code=0).status_code == 200

    def restore(self, settings: Settings, lose: bool) -> None:
        snapshot_once(settings)
        if lose:
            lose_redis_data(self.rclient, settings.redis_prefix)
            assert restore_if_empty(settings)
        else:
            restore_from_file(settings, settings.scheduler_db, force=True)
        register(self.api, "a")
        self.after = {j: d for j, d in self.after.items() if self.rclient.exists(self.keys.job(j))}
        self.restored = True

    def check(self, settled: bool) -> None:
        keys, rclient = self.keys, self.rclient
        jobs = {j: json.loads(rclient.get(keys.job(j)) or b"{}") for j in self.jobs}
        status = {j: job["status"] for j, job in jobs.items()}
        for job_id, deps in self.after.items():
            count = rclient.hget(keys.waiting, job_id)
            if status[job_id] in ("pending", "running", "done"):
                assert all(status[d] == "done" for d in deps), (job_id, deps)
            if status[job_id] != "waiting":
                assert count is None, job_id
                continue
            assert count is not None, job_id
            if settled:
                assert int(count) == sum(status[d] != "done" for d in deps), job_id
                assert "failed" not in {status[d] for d in deps}, job_id
        if settled:
            assert rclient.zcard(keys.endings) == 0
        if not self.restored:
            outbox = rclient.lrange(keys.outbox, 0, -1)
            events = Counter(json.loads(e.split(b" ", 1)[1])["job_id"] for e in outbox)
            for job_id in self.jobs:
                assert events[job_id] == rclient.llen(keys.attempts(job_id)), job_id


def step(done: Run, settings: Settings, rnd: random.Random) -> None:
    jobs, api = done.jobs, done.api
    pick = rnd.random()
    if pick < 0.35 or len(jobs) < 5:
        done.submit(rnd.sample(jobs, k=min(len(jobs), rnd.randint(0, 5))))
    elif pick < 0.40:
        done.submit([done.some(rnd, "pending"), *rnd.sample(jobs, k=rnd.randint(0, 1))], 130)
    elif pick < 0.52:
        api.delete(f"/jobs/{done.some(rnd, 'waiting')}")
    elif pick < 0.70:
        done.run(done.some(rnd, "pending"), rnd.choice(["done", "done", "failed"]))
    elif pick < 0.80:
        api.post(f"/jobs/{done.some(rnd, 'failed')}/retry")
    elif pick < 0.85:
        api.post("/jobs/retry", json={"job_ids": [done.some(rnd, "failed") for _ in range(5)]})
    elif pick < 0.87:
        done.restore(settings, lose=rnd.random() < 0.5)
    elif pick < 0.92:
        done.store.run(settle_endings(time.time(), units=rnd.choice([20, 60, 200])))
    else:
        done.submit([done.some(rnd, "waiting")])  # after a waiter, doomed or not


@pytest.mark.parametrize("seed", range(2))
def test_random_operations_between_the_pieces_keep_every_job_right(
    make_client: ClientFactory,
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
    seed: int,
) -> None:
    api = make_client(settings)
    register(api, "a")
    done, rnd = Run(api, store, rclient), random.Random(seed)
    for i in range(150):
        step(done, settings, rnd)
        if i % 10 == 0:
            done.check(settled=False)
    assert store.run(ops.upkeep.settle_endings()).left == 0
    done.check(settled=True)

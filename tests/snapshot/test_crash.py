"""Snapshot and restore across processes: kill -9 mid-way, and several starters at once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from scheduler.config import Settings
from scheduler.models.job import JobCreate, JobUpdate, new_job
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement
from scheduler.snapshot.locking import SNAPSHOT_LOCK
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once, write_snapshot
from scheduler.store import ops
from scheduler.store.keys import Keys, glob_escape
from scheduler.store.legacy_keys import LegacyKeys
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.sync_store import SyncJobStore
from tests.processes import api_replicas, scheduler_env
from tests.records import stored_job
from tests.snapshot_helpers import job_state, lose_redis_data, rows

JOBS = 2500  # several snapshot and restore batches of 1000

# Child processes: they run the real code, paused at one point by wrapping one of its steps,
# so the test can kill -9 them exactly there. Each writes `paused` to the file in argv[2].
PAUSE = """
import sys, time
from pathlib import Path
import scheduler.snapshot.writer as snap
import scheduler.snapshot.db as snapshot_db
from scheduler.config import Settings

point, marker = sys.argv[1], Path(sys.argv[2])

def pause():
    marker.write_text("paused")
    time.sleep(600)

def wrap(module, name, before=False, at_call=1):
    original, calls = getattr(module, name), []
    def wrapped(*args, **kwargs):
        calls.append(1)
        if before and len(calls) == at_call:
            pause()
        result = original(*args, **kwargs)
        if not before and len(calls) == at_call:
            pause()
        return result
    setattr(module, name, wrapped)

settings = Settings.from_env()
# The snapshot runs with its real lock lifetime: a batch slower than the lifetime abandons the
# snapshot (rolled back, exit 0), and with 1 s a loaded machine's child did so before it paused.
# The test makes the dead holder's lock expire itself (expire_dead_snapshot_lock).
if point == "snapshot-mid":  # after a second batch is upserted, before the commit
    wrap(snapshot_db, "upsert", at_call=2)
    snap.snapshot_once(settings)
elif point == "snapshot-committed":  # after the commit, before the ids leave the set
    wrap(snap, "_forget", before=True)
    snap.snapshot_once(settings)
elif point == "restore-mid":  # after the first batch reached Redis
    original = snapshot_db.read_batches
    def batches(conn, size):
        for i, rows in enumerate(original(conn, size)):
            # The third batch is asked for only once the first one's send has returned
            # (one batch in flight): pausing at the second raced that send.
            if i == 2:
                pause()
            yield rows
    snapshot_db.read_batches = batches
    import scheduler.snapshot.restore as restore
    restore.restore_if_empty(settings, lock_ttl=1.0)
elif point == "upgrade-mid":  # the old layout's keys half renamed (store/migrate.py)
    import scheduler.store.migrate as migrate
    wrap(migrate, "_rename", at_call=40)
    import scheduler.snapshot.restore as restore
    restore.restore_if_empty(settings, lock_ttl=1.0)
elif point == "upgrade-mid-default-lock":  # the same, with the restore lock as a start takes it
    import scheduler.store.migrate as migrate
    wrap(migrate, "_rename", at_call=40)
    import scheduler.snapshot.restore as restore
    restore.restore_if_empty(settings)
"""

STARTER = """
import os, sys, time
import redis
from scheduler.config import Settings
from scheduler.store.keys import Keys
from scheduler.snapshot.restore import restore_if_empty
from scheduler.store import ops
settings = Settings.from_env()
open(sys.argv[1], "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.002)
restored = restore_if_empty(settings)
client = redis.Redis.from_url(settings.redis_url)
print(int(restored), client.zcard(Keys(settings.redis_prefix).all_jobs), flush=True)
"""


def child_env(settings: Settings) -> dict[str, str]:
    return scheduler_env(
        settings.redis_url, settings.redis_prefix, SCHEDULER_DB=settings.scheduler_db
    )


def create_jobs(store: SyncJobStore, count: int, now: float) -> None:
    """`count` jobs through the create script, as POST /jobs makes them (all marked changed)."""
    job = new_job(JobCreate(command="echo"), rfc3339(now))
    # As a starting serve or worker would: the restore question is settled before any create.
    store.run(snapshot_scripts.finish_restore(0, "test"))
    for _ in range(count):
        store.run(ops.jobs.create(job, Placement.fixed("n1"), now))


def run_until_paused(point: str, settings: Settings, tmp_path: Path) -> subprocess.Popen[bytes]:
    marker = tmp_path / f"{point}.paused"
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSE, point, str(marker)], env=child_env(settings)
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"the child never reached {point} (exit {proc.returncode})")
        time.sleep(0.01)
    return proc


def kill_9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def expire_dead_snapshot_lock(r: redis.Redis, prefix: str) -> None:
    """The lock a snapshotter killed -9 held blocks the next snapshot until it expires
    (SNAPSHOT_LOCK_SECS): the test stands for that wait by making it expire soon."""
    lock = Keys(prefix).lock(SNAPSHOT_LOCK)
    assert r.pttl(lock) > 0  # still held by the dead process
    r.pexpire(lock, 500)


def assert_snapshot_matches_redis(path: Path, r: redis.Redis, prefix: str) -> None:
    saved = rows(path)
    heads = (
        key.decode().removeprefix(Keys(prefix).job(""))
        for key in r.scan_iter(glob_escape(Keys(prefix).job("")) + "*", count=1000)
    )
    # A record's other parts are keys job:<id>:<part> (models/record.py), read with its head.
    records = {job_id: stored_job(r, Keys(prefix), job_id) for job_id in heads if ":" not in job_id}
    assert set(saved) == set(records)
    for job_id, record in records.items():
        row = saved[job_id]
        assert (row["status"], row["created_at"]) == (record["status"], record["created_at"])
        assert row["running_at"] == record.get("running_at")


@pytest.mark.parametrize("point", ["snapshot-mid", "snapshot-committed"])
def test_kill_9_during_a_snapshot_forgets_no_change(
    point: str,
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
    prefix: str,
    tmp_path: Path,
) -> None:
    create_jobs(store, JOBS, time.time())
    proc = run_until_paused(point, settings, tmp_path)
    try:
        # Changes keep coming while the snapshot is stuck.
        update = JobUpdate(status="running")
        retries = RetryPolicy.of(settings)
        store.run(
            job_scripts.transition("job-5", update, time.time(), retries, "open", node_ttl=30)
        )
        create_jobs(store, 3, time.time())
    finally:
        kill_9(proc)
    db = Path(settings.scheduler_db)
    if point == "snapshot-mid":
        assert not db.exists() or rows(db) == {}  # nothing committed
    else:
        assert len(rows(db)) == JOBS  # committed, but its ids are still in flight
    assert rclient.scard(Keys(prefix).dirty_inflight) == JOBS

    # The next snapshot (once the dead holder's lock has expired) writes every change.
    expire_dead_snapshot_lock(rclient, prefix)
    assert write_snapshot(settings, wait=True) == JOBS + 3
    assert_snapshot_matches_redis(db, rclient, prefix)
    assert rows(db)["job-5"]["status"] == "running"
    assert not rclient.exists(Keys(prefix).dirty, Keys(prefix).dirty_inflight)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_a_restore_killed_midway_is_started_again(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    create_jobs(store, JOBS, time.time())
    assert snapshot_once(settings) == JOBS
    before = job_state(rclient, prefix)
    lose_redis_data(rclient, prefix)

    proc = run_until_paused("restore-mid", settings, tmp_path)
    kill_9(proc)
    assert 0 < rclient.zcard(Keys(prefix).all_jobs) < JOBS  # a partial restore is left behind
    assert rclient.exists(Keys(prefix).restoring)

    assert restore_if_empty(settings) is True  # after the dead restorer's lock expires
    assert job_state(rclient, prefix) == before
    assert not rclient.exists(Keys(prefix).restoring)


def test_an_upgrade_killed_midway_goes_on_at_the_next_start(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """A deployment of the layout before the hash tag (P:...), with a snapshot older than its
    state: a start killed midway through the renames leaves both layouts; the next start
    finishes the renames and, finding the old marker, does not restore the snapshot."""
    create_jobs(store, 20, time.time())
    assert snapshot_once(settings) == 20
    create_jobs(store, 80, time.time())
    before = job_state(rclient, prefix)
    keys, old = Keys(prefix), LegacyKeys(prefix)
    for key in list(rclient.scan_iter(keys.pattern())):
        rclient.rename(key, old.root + key.decode().removeprefix(keys.root))

    kill_9(run_until_paused("upgrade-mid", settings, tmp_path))
    assert rclient.exists(old.initialised) and not rclient.exists(keys.initialised)
    assert 0 < len(list(rclient.scan_iter(keys.pattern()))) < 140  # some renamed, not all

    assert restore_if_empty(settings) is False  # after the dead starter's lock expires
    assert job_state(rclient, prefix) == before
    retired = {old.initialised.encode(), old.of(keys.job_seq, keys).encode()}
    assert set(rclient.scan_iter(old.pattern())) == retired  # the tombstones only
    assert rclient.zcard(keys.all_jobs) == 100


def test_three_processes_starting_at_once_restore_once(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    create_jobs(store, JOBS, time.time())
    assert snapshot_once(settings) == JOBS
    before = job_state(rclient, prefix)
    lose_redis_data(rclient, prefix)

    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(tmp_path / f"ready{i}"), str(go)],
            env=child_env(settings),
            stdout=subprocess.PIPE,
        )
        for i in range(3)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{i}").exists() for i in range(3)):
            assert time.monotonic() < deadline, "the starters did not come up"
            assert all(p.poll() is None for p in procs)
            time.sleep(0.01)
        go.touch()
        outputs = [p.communicate(timeout=120)[0].decode().split() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert sorted(restored for restored, _ in outputs) == ["0", "0", "1"]
    # Those that did not restore returned only once the restore was complete.
    assert [count for _, count in outputs] == [str(JOBS)] * 3
    assert job_state(rclient, prefix) == before
    assert rclient.get(Keys(prefix).job_seq) == str(JOBS).encode()


def test_three_serve_processes_start_on_a_lost_redis(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    create_jobs(store, 50, time.time())
    assert snapshot_once(settings) == 50
    lose_redis_data(rclient, prefix)
    env = child_env(settings)
    with api_replicas(3, env) as urls:
        for url in urls:
            listing = httpx.get(f"{url}/jobs", timeout=10).json()
            assert [job["job_id"] for job in listing] == [f"job-{n}" for n in range(1, 51)]
    marker = rclient.get(Keys(prefix).initialised)
    assert isinstance(marker, bytes) and marker.startswith(b"restored 50 jobs")
    assert rclient.get(Keys(prefix).job_seq) == b"50"

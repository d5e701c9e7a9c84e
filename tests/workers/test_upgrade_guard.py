"""The upgrade from the layout before the hash tag cannot split a deployment silently
(store/migrate.py): while a process of the old version runs, the upgrade refuses and changes
nothing (a starting `scheduler worker` waits, saying what it saw, and goes on once it is
gone); once done, the old names are retired so an old process neither restores the snapshot
into them nor numbers a job; what an old process writes afterwards is reported by the API
(log, metric, /health)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scheduler.api import upgrade as api_upgrade
from scheduler.config import Settings
from scheduler.models.job import JobCreate, new_job
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement
from scheduler.snapshot.restore import restore_if_empty
from scheduler.store import migrate
from scheduler.store.keys import Keys
from scheduler.store.legacy_keys import LegacyKeys
from scheduler.store.migrate import RQ_KINDS, OldLayoutAlive, old_layout_findings
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory
from tests.processes import scheduler_env, stop
from workers import queues
from workers.rq_migrate import move_legacy_rq

JOBS = 30


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def old_deployment(store: SyncJobStore, r: redis.Redis, prefix: str, jobs: int = JOBS) -> None:
    """`jobs` jobs made by the create script, then every key renamed to the old layout."""
    keys, old = Keys(prefix), LegacyKeys(prefix)
    job = new_job(JobCreate(command="echo"), rfc3339(time.time()))
    store.run(snapshot_scripts.finish_restore(0, "started empty"))
    for _ in range(jobs):
        store.create(job, Placement.fixed("n1"), time.time())
    for raw in list(r.scan_iter(match=keys.pattern())):
        r.rename(raw, old.root + _text(raw).removeprefix(keys.root))


def everything(r: redis.Redis, prefix: str) -> dict[str, bytes | None]:
    """Every key of the deployment in both layouts (rq's old ones of our queues too), dumped."""
    patterns = [Keys(prefix).pattern(), LegacyKeys(prefix).pattern(), "rq:*"]
    names = {_text(k) for pattern in patterns for k in r.scan_iter(match=pattern)}
    return {
        name: r.dump(name) for name in sorted(names) if not name.startswith("rq:") or prefix in name
    }


def register_old_worker(r: redis.Redis, prefix: str, name: str = "old-1") -> str:
    """An rq worker of the old version on our queues, as rq registers one (a hash with a TTL
    its heartbeat renews, in rq:workers:<queue>)."""
    keys, worker = Keys(prefix), f"rq:worker:{prefix}-{name}"
    names = [keys.rq_queue(kind) for kind in RQ_KINDS]
    for queue in names:
        r.sadd(LegacyKeys.rq_workers(queue), worker)
    beat = "2026-12-03T03:30:00.000000Z"
    fields = {
        "queues": ",".join(names),
        "hostname": "old-host",
        "pid": 4242,
        "last_heartbeat": beat,
    }
    r.hset(worker, mapping=fields)
    r.expire(worker, 420)
    return worker


def stop_old_worker(r: redis.Redis, worker: str) -> None:
    """What rq does when that worker stops: its death recorded, its hash gone in 60 s."""
    r.hset(worker, "death", "2026-12-03T03:31:00.000000Z")
    r.expire(worker, 60)


def test_an_old_rq_worker_alive_refuses_the_upgrade_and_changes_nothing(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    old_deployment(store, rclient, prefix)
    worker = register_old_worker(rclient, prefix)
    before = everything(rclient, prefix)

    with pytest.raises(OldLayoutAlive) as refused:
        restore_if_empty(settings)

    message = str(refused.value)
    assert f"rq worker {worker} of the old layout" in message, message
    assert "host old-host, pid 4242" in message, message
    assert everything(rclient, prefix) == before  # nothing renamed, no lock left behind

    stop_old_worker(rclient, worker)
    assert restore_if_empty(settings) is False  # upgraded: the old marker said "settled"
    assert rclient.zcard(Keys(prefix).all_jobs) == JOBS


def test_an_old_api_holding_a_long_poll_refuses_the_upgrade(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    old_deployment(store, rclient, prefix)
    before = everything(rclient, prefix)
    channel = LegacyKeys(prefix).root + "wake:node:n1"
    waiting = rclient.pubsub()
    waiting.subscribe(channel)
    try:
        assert waiting.get_message(timeout=10)["type"] == "subscribe"  # type: ignore[index]
        with pytest.raises(OldLayoutAlive, match="an API of the old layout holds long-polls"):
            restore_if_empty(settings)
        assert everything(rclient, prefix) == before
    finally:
        waiting.close()


def test_old_keys_changing_while_watched_refuse_the_upgrade(
    make_settings: SettingsFactory,
    store: SyncJobStore,
    rclient: redis.Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An old API with no rq worker and no long-poll: an agent's heartbeat lands between two
    reads of the watch (made to land there: the test does not race the clock)."""
    old_deployment(store, rclient, prefix)
    old_seen = LegacyKeys(prefix).of(Keys(prefix).nodes_seen, Keys(prefix))
    reads, real = [], migrate._fingerprint

    def heartbeat_between_reads(client: redis.Redis, of: str) -> dict[str, Any]:
        if reads:
            rclient.zadd(old_seen, {"n1": time.time() + len(reads)})
        reads.append(1)
        return real(client, of)

    monkeypatch.setattr(migrate, "_fingerprint", heartbeat_between_reads)
    monkeypatch.setattr(migrate, "WATCH_STEP_SECS", 0.01)
    before = everything(rclient, prefix)
    before.pop(old_seen, None)

    with pytest.raises(OldLayoutAlive, match=f"old keys changing: {old_seen} "):
        restore_if_empty(make_settings(upgrade_watch_secs=5.0))

    after = everything(rclient, prefix)
    after.pop(old_seen)
    assert after == before

    # Stopped, the old API writes nothing: the watch sees no change and the upgrade goes on.
    monkeypatch.setattr(migrate, "_fingerprint", real)
    assert restore_if_empty(make_settings(upgrade_watch_secs=0.3)) is False
    assert rclient.zcard(Keys(prefix).all_jobs) == JOBS


def test_the_old_names_are_retired_so_an_old_process_can_neither_restore_nor_number(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    """What the old version reads: its restore decision (old snapshot/restore.py, settle)
    restores only while EXISTS P:initialised is 0; its create script INCRs P:seq:job."""
    keys, old = Keys(prefix), LegacyKeys(prefix)
    old_deployment(store, rclient, prefix)
    assert restore_if_empty(settings) is False

    assert rclient.exists(old.initialised) == 1  # an old process finds its question answered
    with pytest.raises(redis.ResponseError, match="not an integer"):
        rclient.incr(old.of(keys.job_seq, keys))  # an old API cannot make a second job-11
    assert old_layout_findings(rclient, prefix) == []  # the tombstones are not findings

    # The new layout emptied (Redis lost its data), the tombstones left: not an old
    # deployment to rename (that would copy a tombstone into the new job counter).
    for raw in list(rclient.scan_iter(match=keys.pattern())):
        rclient.delete(raw)
    assert migrate.rename_legacy_keys(rclient, keys) == 0
    assert not rclient.exists(keys.job_seq)


def test_rq_work_is_not_moved_while_an_old_worker_runs(
    settings: Settings, rclient: redis.Redis, prefix: str
) -> None:
    keys = Keys(prefix)
    queue = keys.rq_queue(queues.EVENTS)
    started = keys.rq_job_id("event", 1)
    rclient.hset(LegacyKeys.rq("job", started), mapping={"status": "started", "origin": queue})
    rclient.zadd(LegacyKeys.rq("wip", queue), {f"{started}:execution-1": time.time() + 60})
    worker = register_old_worker(rclient, prefix)
    before = everything(rclient, prefix)

    with pytest.raises(OldLayoutAlive, match="of the old layout"):
        move_legacy_rq(rclient, settings)  # it runs that job: queued again, it would run twice
    assert everything(rclient, prefix) == before

    stop_old_worker(rclient, worker)
    moved = move_legacy_rq(rclient, settings)
    assert moved is not None and moved.requeued == 1


@pytest.fixture
def worker_log(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "worker.log"


def wait_for(condition: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def test_a_starting_worker_waits_for_the_old_worker_to_stop_then_upgrades(
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
    prefix: str,
    redis_url: str,
    worker_log: Path,
) -> None:
    old_deployment(store, rclient, prefix)
    worker = register_old_worker(rclient, prefix)
    before = everything(rclient, prefix)
    env = scheduler_env(redis_url, prefix, SCHEDULER_DB=settings.scheduler_db)
    with worker_log.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "worker", "--burst"], env=env, stderr=log
        )
    try:
        wait_for(lambda: "upgrade refused" in worker_log.read_text(), "the refusal logged")
        text = worker_log.read_text()
        assert " ERROR " in text and worker in text and "trying again" in text, text
        assert proc.poll() is None  # waiting, not exited
        assert everything(rclient, prefix) == before

        stop_old_worker(rclient, worker)
        assert proc.wait(timeout=120) == 0, worker_log.read_text()
    finally:
        stop(proc)
    assert "upgrade: renamed" in worker_log.read_text()
    assert rclient.zcard(Keys(prefix).all_jobs) == JOBS


def test_old_keys_after_the_upgrade_are_reported_by_metrics_and_log_not_by_health(
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
    prefix: str,
    make_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys, old = Keys(prefix), LegacyKeys(prefix)
    old_deployment(store, rclient, prefix)
    assert restore_if_empty(settings) is False
    monkeypatch.setattr(api_upgrade, "CHECK_SECS", 0.05)
    # An old API started again takes a heartbeat, an old worker registers: both before the
    # API's first check, which logs what it finds once (again only a minute later), so that
    # the line names both.
    rclient.zadd(old.of(keys.nodes_seen, keys), {"n1": time.time()})
    worker = register_old_worker(rclient, prefix)
    api = make_client(settings)

    def reported() -> str:
        return str(api.get("/metrics").text)

    with caplog.at_level(logging.ERROR, logger="scheduler.api.upgrade"):
        wait_for(lambda: "findings 2.0" in reported(), "both findings in the gauge", timeout=30)
    logged = [r.message for r in caplog.records if "before the hash tag is in use" in r.message]
    assert logged and worker in logged[0]
    assert f"keys of the old layout: {old.of(keys.nodes_seen, keys)}" in logged[0]
    # Issue 36, finding 7: /health, which anyone may call, named the old worker's host.
    assert api.get("/health").content == b'{"service":"scheduler","status":"healthy"}\n'
    # The new version reads none of it: its own state is untouched.
    assert api.get("/jobs").json().__len__() == JOBS

    rclient.delete(old.of(keys.nodes_seen, keys), worker)
    wait_for(lambda: "findings 0.0" in reported(), "the findings cleared", 30)


def test_a_killed_upgrade_leaves_a_lock_that_ends_within_seconds(
    settings: Settings, rclient: redis.Redis, prefix: str, store: SyncJobStore, tmp_path: Path
) -> None:
    """The restore lock's TTL is short and renewed while its holder lives: a start killed -9
    midway through the renames blocks the next one for RESTORE_LOCK_SECS at most, not the 30 s
    it used to."""
    from scheduler.snapshot.locking import RESTORE_LOCK, RESTORE_LOCK_SECS
    from tests.snapshot.test_crash import kill_9, run_until_paused

    keys = Keys(prefix)
    old_deployment(store, rclient, prefix, jobs=200)
    proc = run_until_paused("upgrade-mid-default-lock", settings, tmp_path)
    assert rclient.exists(keys.lock(RESTORE_LOCK))  # held, paused midway through the renames
    kill_9(proc)
    left = rclient.pttl(keys.lock(RESTORE_LOCK))
    assert 0 < left <= RESTORE_LOCK_SECS * 1000, left

    assert restore_if_empty(settings) is False  # resumes once that short TTL ends
    assert rclient.zcard(keys.all_jobs) == 200

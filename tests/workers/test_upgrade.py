"""The upgrade from the layout before the hash tag ("P:..." and rq's "rq:...", store/keys.py):
an old deployment, written as the old version left it, is started with the new code (a real
`scheduler worker --burst` process) and nothing is lost, nothing is left under the old names,
the older SQLite snapshot is not restored over it, and the next start changes nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
import rq.defaults
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.restore import restore_if_empty
from scheduler.store.keys import Keys, glob_escape
from scheduler.store.legacy_keys import LegacyKeys
from scheduler.store.migrate import RETIRED, rename_legacy_keys
from tests.conftest import ClientFactory, CtxFactory, assert_json, register, report, submit
from tests.fakes import FakeSNS, ending_number
from tests.processes import scheduler_env, worker_burst
from tests.snapshot_helpers import job_state
from workers import queues, tasks
from workers.rq_migrate import move_legacy_rq


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def finish(api: TestClient) -> str:
    job_id: str = submit(api, command="work")["job_id"]
    assert_json(report(api, job_id, "running"))
    assert_json(report(api, job_id, "done", exit_code=0))
    return job_id


def build_old_deployment(
    make_ctx: CtxFactory, make_client: ClientFactory, sns: FakeSNS, r: redis.Redis
) -> dict[str, Any]:
    """A deployment as the old version left it: finished jobs, a job pending on node n1, an
    older SQLite snapshot, one publish queued in rq and one scheduled (a retry), all under the
    old names. Written by the real code, then renamed to the old layout by hand."""
    ctx = make_ctx(sns_url=sns.url)
    settings, keys = ctx.settings, ctx.keys
    api = make_client(settings)
    register(api, "n1")
    first = finish(api)
    assert tasks.snapshot(period=1) == 1  # the snapshot knows the first job only
    second = finish(api)
    pending = submit(api, command="later")["job_id"]
    assert tasks.flush_outbox(period=1) == 2  # both endings' events enqueued on rq
    # The second's failed once: rq holds its retry in the scheduled registry, due now.
    in_process = Keys(settings.redis_prefix)
    events = queues.queue(r, settings, queues.EVENTS)
    retried = keys.rq_job_id("event", ending_number(r, in_process, second))
    r.lrem(events.key, 1, retried)
    r.zadd(events.scheduled_job_registry.key, {retried: time.time() - 1})
    r.hset(events.job_class.key_for(retried), "status", "scheduled")
    # The old names: "P:..." for ours, rq's default prefix for rq's.
    old = LegacyKeys(settings.redis_prefix)
    for raw in list(r.scan_iter(match=glob_escape(in_process.root) + "*")):
        r.rename(raw, old.root + _text(raw).removeprefix(in_process.root))
    ours = settings.redis_prefix  # in every rq key of this deployment: queue names, job ids
    for raw in list(r.scan_iter(match=glob_escape(rq.defaults.RQ_KEY_PREFIX) + ":*")):
        if ours in _text(raw):
            legacy = LegacyKeys.rq_prefix() + _text(raw).removeprefix(rq.defaults.RQ_KEY_PREFIX)
            r.rename(raw, legacy)
    assert r.exists(old.initialised, old.root + "jobs", LegacyKeys.rq("job", retried)) == 3
    r.set(f"{settings.redis_prefix}:x:jobs", "another deployment's (prefix P:x)")
    return {"settings": settings, "done": [first, second], "pending": pending}


def old_leftovers(r: redis.Redis, prefix: str) -> list[str]:
    """The old layout's keys of the deployment, but the two the upgrade leaves retired."""
    old = LegacyKeys(prefix)
    ours = [_text(k) for k in r.scan_iter(match=old.pattern()) if old.owns(_text(k))]
    rqs = [_text(k) for k in r.scan_iter(match=LegacyKeys.rq_prefix() + ":*")]
    return sorted(
        [k for k in ours if k not in retired(r, prefix)] + [k for k in rqs if prefix in k]
    )


def retired(r: redis.Redis, prefix: str) -> list[str]:
    """The old marker and job counter, where they hold the upgrade's tombstone."""
    keys, old = Keys(prefix), LegacyKeys(prefix)
    names = [old.initialised, old.of(keys.job_seq, keys)]
    return [name for name in names if _text(r.get(name) or b"").startswith(RETIRED)]


def burst_worker(settings: Settings, redis_url: str, sns: FakeSNS) -> str:
    """`scheduler worker --burst`, a real process of the new code; returns its log."""
    env = scheduler_env(
        redis_url,
        settings.redis_prefix,
        SNS_URL=sns.url,
        SCHEDULER_DB=settings.scheduler_db,
        HTTP_TIMEOUT_SECS="2",
    )
    done = worker_burst(env)
    return done.stderr


def crash_midway(r: redis.Redis, settings: Settings) -> None:
    """What a start killed midway through the upgrade leaves: half of our keys renamed (the
    marker, renamed last, not), the queued publish moved under rq's new prefix."""
    keys, old = Keys(settings.redis_prefix), LegacyKeys(settings.redis_prefix)
    renames = sorted(k for k in old_leftovers(r, settings.redis_prefix) if k.startswith(old.root))
    renames.remove(old.initialised)
    for key in renames[: len(renames) // 2]:
        r.rename(key, old.renamed(key, keys))
    queue = keys.rq_queue(queues.EVENTS)
    first = _text(r.lindex(LegacyKeys.rq("queue", queue), 0))  # the first job's publish
    r.rename(LegacyKeys.rq("job", first), keys.rq_key("job", first))
    r.rpush(keys.rq_key("queue", queue), first)
    r.lrem(LegacyKeys.rq("queue", queue), 1, first)


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "after-a-crash-midway"])
def test_an_old_deployment_is_renamed_at_start_and_loses_nothing(
    make_ctx: CtxFactory,
    make_client: ClientFactory,
    sns: FakeSNS,
    rclient: redis.Redis,
    redis_url: str,
    crashed: bool,
) -> None:
    old = build_old_deployment(make_ctx, make_client, sns, rclient)
    settings: Settings = old["settings"]
    prefix, keys = settings.redis_prefix, Keys(settings.redis_prefix)
    if crashed:
        crash_midway(rclient, settings)

    log = burst_worker(settings, redis_url, sns)

    assert old_leftovers(rclient, prefix) == []
    assert len(retired(rclient, prefix)) == 2  # what an old process would find
    assert rclient.exists(f"{prefix}:x:jobs")  # another deployment's key is not ours
    # Every job readable through the API; the pending one still waits for its node.
    api = make_client(settings)
    listed = assert_json(api.get("/jobs"))
    assert sorted(job["job_id"] for job in listed) == sorted([*old["done"], old["pending"]])
    pending = assert_json(api.get(f"/jobs/{old['pending']}"))
    assert (pending["status"], pending["node_id"]) == ("pending", "n1")
    polled = assert_json(api.get("/jobs", params={"node_id": "n1", "status": "pending"}))
    assert [job["job_id"] for job in polled] == [old["pending"]]
    # Both publishes were made, from rq's new keys (the scheduled one promoted first).
    assert sorted(e["job_id"] for e in sns.events()) == sorted(old["done"])
    for job_id in old["done"]:
        number = ending_number(rclient, keys, job_id)
        assert rclient.exists(keys.rq_key("job", keys.rq_job_id("event", number)))
    assert "upgrade: renamed" in log and "upgrade: moved rq's work" in log, log

    # The next start changes nothing: no rename, no move, no restore, no publish again.
    state = job_state(rclient, prefix)
    assert rename_legacy_keys(rclient, keys) == 0
    assert move_legacy_rq(rclient, settings) is None
    assert restore_if_empty(settings) is False
    assert "upgrade" not in burst_worker(settings, redis_url, sns)
    assert job_state(rclient, prefix) == state
    assert len(sns.events()) == 2


def test_started_jobs_are_queued_again_and_ids_without_a_job_dropped(
    rclient: redis.Redis, make_settings: Any
) -> None:
    """Written by hand in the old layout: a publish an old worker had started (rq's wip
    registry), one it had popped (the intermediate list), a queued id whose job expired."""
    settings: Settings = make_settings()
    keys = Keys(settings.redis_prefix)
    queue = keys.rq_queue(queues.EVENTS)
    started, popped, expired = (keys.rq_job_id("event", n) for n in (1, 2, 3))
    for job_id in (started, popped):
        rclient.hset(LegacyKeys.rq("job", job_id), mapping={"status": "started", "origin": queue})
    rclient.zadd(LegacyKeys.rq("wip", queue), {f"{started}:execution-1": time.time() + 60})
    rclient.rpush(LegacyKeys.rq("queue", queue) + ":intermediate", popped)
    rclient.rpush(LegacyKeys.rq("queue", queue), expired)
    rclient.sadd(LegacyKeys.rq_queues(), LegacyKeys.rq("queue", queue))

    moved = move_legacy_rq(rclient, settings)

    assert moved is not None
    assert (moved.queued, moved.requeued, moved.registered, moved.dropped) == (0, 2, 0, 1)
    assert rclient.lrange(keys.rq_key("queue", queue), 0, -1) == [popped.encode(), started.encode()]
    for job_id in (started, popped):
        assert rclient.hget(keys.rq_key("job", job_id), "status") == b"queued"
    assert rclient.smembers(keys.rq_queues) == {keys.rq_key("queue", queue).encode()}
    assert old_leftovers(rclient, settings.redis_prefix) == []
    assert move_legacy_rq(rclient, settings) is None

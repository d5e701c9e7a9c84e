"""A sharded deployment's failures (DEPLOYMENT.md, Durability; ARCHITECTURE.md, Shards), against
real redis-server processes: a shard whose Redis comes back empty, restored from its own file
`scheduler-k.db` (by its running worker, by the API for an agent's report, stamped after the
restore, in token mode too, where the agent registers again, by the operator's `scheduler
restore --shard k`); the layout's record kept when shard 0 is the one lost (its count,
floors and the nodes kept on shard 0); another shard count refused by every command before
anything is restored or written; a shard's worker killed -9 mid-sweep; and the upgrade from
one shard to three with work in flight."""

from __future__ import annotations

import asyncio
import json
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
from starlette.testclient import TestClient

from scheduler.agent.config import AgentConfig
from scheduler.agent.executor import Outcome
from scheduler.agent.remote import Remote
from scheduler.api import hot
from scheduler.api.agents import PRECHECK_OVER_BYTES
from scheduler.api.app import create_app
from scheduler.cli.main import main as cli_main
from scheduler.config import Settings
from scheduler.models.wire import parse_rfc3339
from scheduler.nodes.registry import BuiltinRegistry
from scheduler.snapshot import db as snapshot_db
from scheduler.snapshot.locking import open_store
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import write_snapshot
from scheduler.store import ops
from scheduler.store.errors import LayoutChanged, StoreNotReady
from scheduler.store.jobs import JobStore
from scheduler.store.keys import Keys
from scheduler.store.scripts import snapshot as snapshot_scripts
from tests.api.test_shards import SHARDS, by_number, listed, polled, shard_nodes, stored
from tests.api.test_shards_start import snapshot_every_shard
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    Serve,
    SettingsFactory,
    assert_json,
    last_heard,
    register,
    report,
    submit,
)
from tests.deployment_state import deployment_state
from tests.fakes import eventually
from tests.processes import scheduler_env, stop
from tests.snapshot_helpers import lose_redis_data, rows
from workers import context, firing

KEY = "operator-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}


# NODE_TTL_SECS of the tests whose waits (up to 60 s each) the nodes they registered at the
# start must outlive, however slow the run: the default 30 s did not.
NODE_TTL = 600
LOST = 2 * NODE_TTL  # NODE_LOST_SECS: at least NODE_TTL_SECS


def come_back(api: TestClient, node: str) -> None:
    """What an agent does when its heartbeat finds its node gone: register again."""
    if api.post("/nodes/heartbeat", json={"id": node}).status_code == 404:
        register(api, node)


def test_a_node_kept_on_shard_zero_keeps_its_queue_when_shard_zero_lost_its_data(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """A node of before the upgrade whose id ranks shard 1 first stays on shard 0 with its
    queue. Shard 0 loses its data: the restore brings the layout's record back from the file
    with the jobs, so the node registers on shard 0 again and is offered its queue (found
    again from the nodes shard 0 knew after the loss, it went to shard 1, its queue never
    offered again)."""
    unsharded = make_client(max_jobs_per_node=10)
    node = shard_nodes(1)[0]
    register(unsharded, node)
    old = [submit(unsharded, command=f"old {i}")["job_id"] for i in range(3)]
    settings = make_settings(shards=SHARDS, max_jobs_per_node=10)
    api = make_client(settings)
    new = [submit(api, command=f"new {i}")["job_id"] for i in range(2)]
    assert polled(api, node) == old + new
    record = rclient.hgetall(Keys(settings.redis_prefix).shards)
    snapshot_every_shard(settings)
    lose_redis_data(rclient, settings.redis_prefix)

    back = make_client(settings)
    come_back(back, node)
    assert polled(back, node) == old + new
    assert polled(api, node) == old + new  # a process that served through the loss too
    kept = rclient.hgetall(Keys(settings.redis_prefix).shards)
    assert {k: v for k, v in kept.items() if k != b"filed"} == record
    later = submit(back, command="later")["job_id"]
    assert later not in old + new and listed(back) == by_number([*old, *new, later])


def run_scheduler(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        env=env,
        cwd=os.path.dirname(env["SCHEDULER_DB"]),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_another_count_is_refused_everywhere_when_shard_zero_lost_its_data(
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    rclient: redis.Redis,
    redis_url: str,
    prefix: str,
    db: Path,
) -> None:
    """Shard 0 held the count; once it lost its data, a start with 2 shards found none and
    restored scheduler-1.db (shard 1 of 3's jobs) into its own shard 1, then recorded 2:
    copies of jobs, and the deployment's own processes refused. The count is read from shard
    0's file then: the API, a worker and serve refuse before they restore or write anything."""
    settings = make_settings(shards=SHARDS)
    with TestClient(create_app(settings)) as api:  # stopped: it would flush its metrics
        register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
        made = [submit(api, command=f"c{i}")["job_id"] for i in range(6)]
    snapshot_every_shard(settings)
    lose_redis_data(rclient, settings.redis_prefix)
    before = everything(rclient, prefix)

    two = make_settings(shards=2)
    with pytest.raises(LayoutChanged), TestClient(create_app(two)):
        pass
    env = scheduler_env(redis_url, prefix, SCHEDULER_SHARDS="2", SCHEDULER_DB=str(db))
    for command in (["worker", "--burst"], ["serve", "--port", "1"]):
        done = run_scheduler(env, *command)
        assert done.returncode == 2, (command, done.stderr)
        assert "SCHEDULER_SHARDS is 2, but this deployment was started with 3" in done.stderr
    assert everything(rclient, prefix) == before  # shard 0 as it was lost, the others as they were

    back = make_client(settings)
    assert listed(back) == by_number(made)
    assert stored(rclient, settings)[1] == {j for j in made if int(j[4:]) % SHARDS == 1}


def everything(rclient: redis.Redis, prefix: str) -> dict[bytes, bytes]:
    """Every key of every shard of the deployment `prefix` (any count's: `{prefix-i}`), dumped;
    but what an API process's metrics flush writes on its own timer, whenever it comes (the
    request metrics, its function library's mark: tests/deployment_state.py)."""
    keys = rclient.scan_iter(f"{{{prefix}*")
    flushed = (b":stats:requests", b":libraries")
    return {key: rclient.dump(key) for key in keys if not key.endswith(flushed)}  # type: ignore[misc]


def test_the_floor_is_not_read_from_a_restore_half_done(
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    rclient: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unsharded deployment lost its Redis and comes back sharded: its worker restores
    job-1 to job-5 into shard 0 while the first sharded API starts. The floor (store/
    shard_layout.py) is read from shard 0's jobs: read while only job-1 and job-2 were back,
    it was 2, and job-4 and job-5 (N mod 3 = 1, 2) were looked for on shards 1 and 2."""
    unsharded = make_settings()
    api = make_client(unsharded)
    register(api, shard_nodes(0)[0])
    old = [submit(api, command=f"old {i}")["job_id"] for i in range(5)]
    write_snapshot(unsharded)
    lose_redis_data(rclient, unsharded.redis_prefix)
    half_restored(unsharded, ["job-1", "job-2"])

    settings = make_settings(shards=SHARDS)
    store = JobStore.connect(settings)
    floors = store.where._floors

    async def floors_then_restored() -> tuple[int, int]:
        found = await floors()
        restore_if_empty(settings)  # the worker's restore ends before the record is made
        return found

    monkeypatch.setattr(store.where, "_floors", floors_then_restored)

    async def start() -> None:
        try:
            await store.start()
        except StoreNotReady:  # refused until the restore is done
            restore_if_empty(settings)
            await store.start()
        finally:
            await store.aclose()

    asyncio.run(start())
    assert store.where.layout.floor == 5
    back = make_client(settings)
    for job_id in old:
        assert assert_json(back.get(f"/jobs/{job_id}"))["job_id"] == job_id


def half_restored(settings: Settings, job_ids: list[str]) -> None:
    """Where a restore killed midway leaves Redis: these rows of the file back, the flag
    that a restore is under way (snapshot/restore.py), no marker."""
    with open_store(settings) as store:
        store.redis.set(store.keys.restoring, os.path.abspath(settings.scheduler_db))
        reader = snapshot_db.open_reader(settings.scheduler_db)
        rows = [row for batch in snapshot_db.read_batches(reader, 1000) for row in batch]
        reader.close()
        jobs = [snapshot_db.restored_job(row, 0.0) for row in rows]
        chosen = [job for job in jobs if job.job_id in job_ids]
        store.run(snapshot_scripts.restore_jobs(chosen, mark_dirty=False))


@pytest.fixture
def cli_env(
    make_settings: SettingsFactory, prefix: str, db: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The environment of the operator's commands (cli_main): the deployment's, 3 shards."""
    settings = make_settings(shards=SHARDS)
    for name, value in {
        "REDIS_URL": settings.redis_url,
        "REDIS_PREFIX": prefix,
        "SCHEDULER_DB": str(db),
        "SCHEDULER_SHARDS": str(SHARDS),
    }.items():
        monkeypatch.setenv(name, value)
    return settings


def test_the_operator_snapshots_and_restores_one_shard(
    cli_env: Settings, make_client: ClientFactory, rclient: redis.Redis, db: Path
) -> None:
    """`scheduler snapshot --shard k` and `scheduler restore --shard k --from FILE`: without
    --shard they knew shard 0 alone, so a shard k's file could only be loaded into shard 0,
    where no process looks for its jobs."""
    api = make_client(cli_env)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    made = [submit(api, command=f"c{i}")["job_id"] for i in range(6)]
    one = {job_id for job_id in made if int(job_id.removeprefix("job-")) % SHARDS == 1}
    assert cli_main(["snapshot", "--shard", "1"]) == 0
    assert set(rows(db.with_name("scheduler-1.db"))) == one and not db.exists()

    lose_redis_data(rclient, cli_env.for_shard(1).redis_prefix)
    file = str(db.with_name("scheduler-1.db"))
    assert cli_main(["restore", "--shard", "1", "--from", file]) == 0
    zero, back, _ = stored(rclient, cli_env)
    assert back == one and not zero & one
    assert listed(api) == by_number(made)
    assert cli_main(["restore", "--shard", "3", "--from", file]) == 2  # beyond the deployment's


def test_a_file_holding_a_layout_is_restored_into_its_own_shard_and_count_only(
    cli_env: Settings,
    make_client: ClientFactory,
    rclient: redis.Redis,
    db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Only shard 0's file holds the layout: `scheduler restore --from` it into shard 1, or
    into a deployment of another count (whose shard count the file's record would have
    replaced), is refused before anything is written."""
    api = make_client(cli_env)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    [submit(api, command=f"c{i}") for i in range(6)]
    assert cli_main(["snapshot"]) == 0  # shard 0's, with the layout
    before = everything(rclient, cli_env.redis_prefix)
    assert cli_main(["restore", "--shard", "1", "--from", str(db), "--force"]) == 1
    assert "it is shard 0's file, not shard 1's" in capsys.readouterr().err
    assert everything(rclient, cli_env.redis_prefix) == before

    other = f"{cli_env.redis_prefix}x"  # an unsharded deployment, empty
    monkeypatch.setenv("REDIS_PREFIX", other)
    monkeypatch.setenv("SCHEDULER_DB", str(tmp_path / "other.db"))
    monkeypatch.delenv("SCHEDULER_SHARDS")
    assert cli_main(["restore", "--from", str(db)]) == 2
    assert "SCHEDULER_SHARDS is 1, but this deployment was started with 3" in (
        capsys.readouterr().err
    )
    assert everything(rclient, other) == {}


def test_the_operators_commands_refuse_another_count(
    cli_env: Settings,
    rclient: redis.Redis,
    prefix: str,
    db: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With SCHEDULER_SHARDS=2 on a deployment of 3, `scheduler snapshot` wrote shard 0's
    jobs and `scheduler restore --force` loaded a file into shard 0: both exit 2 now, and
    write nothing, in Redis or in a file."""
    with TestClient(create_app(cli_env)) as api:  # stopped: it would flush its metrics
        register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
        [submit(api, command=f"c{i}") for i in range(6)]
        snapshot_every_shard(cli_env)
        [submit(api, command=f"d{i}") for i in range(6)]  # changes no file has yet
    monkeypatch.setenv("SCHEDULER_SHARDS", "2")
    files = {path: path.read_bytes() for path in db.parent.glob("scheduler*")}
    before = everything(rclient, prefix)
    file = str(db.with_name("scheduler-1.db"))
    for command in (["snapshot"], ["restore", "--from", file, "--force"]):
        assert cli_main(command) == 2, command
        assert "SCHEDULER_SHARDS is 2, but this deployment was started with 3" in (
            capsys.readouterr().err
        )
    assert everything(rclient, prefix) == before
    assert {path: path.read_bytes() for path in db.parent.glob("scheduler*")} == files


# A worker of one shard, its sweep paused between the running jobs of a lost node (handled)
# and its pending ones (not yet), so the test can kill -9 it there. Writes `paused` to argv[1].
SWEEP_PAUSED = """
import sys, time
from pathlib import Path
from scheduler.config import Settings
from scheduler.store.ops import upkeep
from workers import context, tasks

def paused(*args, **kwargs):
    Path(sys.argv[1]).write_text("paused")
    time.sleep(600)

upkeep.requeue_lost = paused
context.configure(Settings.from_env().served())
tasks.sweep(period=1)
"""


def test_a_shards_worker_killed_mid_sweep_loses_and_repeats_nothing(
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    rclient: redis.Redis,
    redis_url: str,
    prefix: str,
    db: Path,
) -> None:
    """Shard 1's node `lost` has running and pending jobs; its worker is killed -9 after its
    sweep retried the running ones and before it moved the pending ones. Another worker of
    shard 1 (`scheduler worker --burst --shard 1`) finishes: every job once, on the live
    node, retried once, in shard 1's file; shards 0 and 2 untouched."""
    limits = {
        "max_jobs_per_node": 10,
        "node_ttl_secs": NODE_TTL,
        "node_lost_secs": LOST,
        "max_job_retries": 1,
    }
    settings = make_settings(shards=SHARDS, **limits)
    api = make_client(settings)
    lost, live = shard_nodes(1, 2)
    register(api, lost, shard_nodes(0)[0], shard_nodes(2)[0])
    made = {job["job_id"]: job for job in (submit(api, command=f"j{i}") for i in range(12))}
    on_lost = [job_id for job_id, job in made.items() if job["node_id"] == lost]
    running, pending = on_lost[:2], on_lost[2:]
    assert pending, made
    for job_id in running:
        assert_json(report(api, job_id, "running"))
    register(api, live)
    last_heard(rclient, settings.for_shard(1), lost, time.time() - 2 * LOST)
    others = {k: deployment_state(rclient, settings.for_shard(k).redis_prefix) for k in (0, 2)}

    env = scheduler_env(redis_url, prefix, SCHEDULER_SHARDS=str(SHARDS), SCHEDULER_DB=str(db))
    env.update(SCHEDULER_SHARD="1", **{name.upper(): str(v) for name, v in limits.items()})
    marker = db.with_name("sweep.paused")
    child = subprocess.Popen([sys.executable, "-c", SWEEP_PAUSED, str(marker)], env=env)
    eventually(lambda: marker.exists() or child.poll() is not None, timeout=60)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    for job_id in running:  # retried on the live node, once
        job = assert_json(api.get(f"/jobs/{job_id}"))
        assert (job["status"], job["node_id"], job["retry_count"]) == ("pending", live, 1)
    assert polled(api, lost) == pending  # not moved yet

    done = run_scheduler(env, "worker", "--burst", "--shard", "1")
    assert done.returncode == 0, done.stderr
    for job_id in on_lost:
        job = assert_json(api.get(f"/jobs/{job_id}"))
        retries = 1 if job_id in running else 0
        assert (job["status"], job["node_id"], job["retry_count"]) == ("pending", live, retries)
    assert sorted(polled(api, live)) == sorted(on_lost) and polled(api, lost) == []
    assert listed(api) == by_number(made)
    shard_one = {job_id for job_id in made if int(job_id.removeprefix("job-")) % SHARDS == 1}
    assert stored(rclient, settings)[1] == shard_one
    saved = rows(db.with_name("scheduler-1.db"))
    assert set(saved) == shard_one
    assert {job_id: saved[job_id]["node_id"] for job_id in on_lost} == dict.fromkeys(on_lost, live)
    assert rclient.llen(Keys(settings.for_shard(1).redis_prefix).outbox) == 0  # no ending
    for k, state in others.items():
        assert deployment_state(rclient, settings.for_shard(k).redis_prefix) == state


def test_an_upgrade_to_three_shards_keeps_what_was_in_flight(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """An unsharded deployment stopped with a job running, one waiting for it, one delayed,
    one queued, one made under an Idempotency-Key, a service and a schedule, then started
    with SCHEDULER_SHARDS=3 (DEPLOYMENT.md, Shards): each goes on where it was, new ids collide with
    none, and the whole comes back from the files after every shard lost its data."""
    with TestClient(create_app(make_settings(max_jobs_per_node=10))) as old:  # all stopped
        node = shard_nodes(1)[0]  # kept on shard 0, with its queue
        register(old, node)
        keyed = {"Idempotency-Key": "order-1"}
        made = assert_json(old.post("/jobs", json={"command": "keyed"}, headers=keyed), 201)
        first = submit(old, command="first")["job_id"]
        assert_json(report(old, first, "running"))
        after = submit(old, command="after first", after=[first])["job_id"]
        later = submit(old, command="later", delay_secs=3600)["job_id"]
        queued = submit(old, command="queued")["job_id"]
        service = assert_json(old.post("/services", json={"node_id": node, "port": 80}), 201)
        body = {"name": "s", "every_secs": 10, "job": {"command": "tick"}}
        # Fired at its first tick exactly: one tick due, wherever the clock stands.
        tick = parse_rfc3339(assert_json(old.post("/schedules", json=body), 201)["next_run_at"])
        before = {j["job_id"]: j for j in assert_json(old.get("/jobs"))}
    settings = make_settings(shards=SHARDS, max_jobs_per_node=10)
    api = make_client(settings)

    assert {j["job_id"]: j for j in assert_json(api.get("/jobs"))} == before
    assert assert_json(api.post("/nodes/heartbeat", json={"id": node}))["id"] == node
    assert polled(api, node) == [made["job_id"], queued]
    replay = api.post("/jobs", json={"command": "keyed"}, headers=keyed)
    assert assert_json(replay, 200) == made
    assert_json(report(api, first, "done", exit_code=0))
    assert assert_json(api.get(f"/jobs/{after}"))["status"] == "pending"
    assert polled(api, node) == by_number([made["job_id"], queued, after])
    again = submit(api, command="after queued", after=[queued])
    assert again["status"] == "waiting" and stored(rclient, settings)[0] >= {again["job_id"]}

    assert assert_json(api.get(f"/services/{service['id']}")) == service
    assert api.patch(f"/services/{service['id']}", json={"status": "crashed"}).status_code == 204
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    services = [
        assert_json(api.post("/services", json={"node_id": n, "port": 81}), 201)["id"]
        for n in (node, shard_nodes(2)[0])
    ]
    assert len({service["id"], *services}) == 3
    assert sorted(s["id"] for s in assert_json(api.get("/services"))) == sorted(
        [service["id"], *services]
    )

    zero = settings.for_shard(0)
    with open_store(zero) as store:
        now = time.time()
        assert store.run(ops.upkeep.promote_due(now + 3601)) == [
            later
        ]  # shard 0's worker, once it is due
        context.configure(zero)
        try:
            fired = asyncio.run(firing.fire_due(context.current(), tick, BuiltinRegistry()))
        finally:
            context.close()
    assert fired["schedule_fired"] + fired["schedule_caught_up"] == 1
    new = [submit(api, command=f"new {i}")["job_id"] for i in range(6)]
    everyone = listed(api)
    assert len(everyone) == len(set(everyone)) == len(before) + 1 + 1 + 6  # after, a tick
    assert set(before) | set(new) | {again["job_id"]} < set(everyone)

    snapshot_every_shard(settings)
    whole = {j["job_id"]: j for j in assert_json(api.get("/jobs"))}
    for k in range(SHARDS):
        lose_redis_data(rclient, settings.for_shard(k).redis_prefix)
    back = make_client(settings)
    assert {j["job_id"]: j for j in assert_json(back.get("/jobs"))} == whole
    come_back(back, node)
    assert polled(back, node) == polled(api, node) != []


@BOTH_FRONTS
@pytest.mark.parametrize("stdout", ["ok", "o" * (PRECHECK_OVER_BYTES + 1)])  # checked first
def test_a_report_to_a_shard_that_lost_its_data_lands_once_it_is_restored(
    stdout: str, make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """Shard 1's Redis came back empty while its agent ran a job: the agent's report, before
    any worker restored the shard, answered 404 and was dropped (neither agent retries a
    404; the Rust agent retries nothing), and the job, restored running, timed out an hour
    later. The API restores the shard then (as for a new job) and the report lands."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    made = [submit(api, command=f"c{i}")["job_id"] for i in range(6)]
    ran, claimed = [j for j in made if int(j.removeprefix("job-")) % SHARDS == 1][:2]
    assert_json(report(api, ran, "running"))
    snapshot_every_shard(settings)
    lose_redis_data(rclient, settings.for_shard(1).redis_prefix)

    done = assert_json(report(api, ran, "done", exit_code=0, stdout=stdout))
    assert (done["status"], done["stdout"]) == ("done", stdout)
    assert assert_json(report(api, claimed, "running"))["status"] == "running"
    outbox = rclient.lrange(Keys(settings.for_shard(1).redis_prefix).outbox, 0, -1)
    assert [json.loads(e.split(b" ", 1)[1]) for e in outbox] == [{"job_id": ran, "status": "done"}]
    assert listed(api) == by_number(made)


@pytest.mark.parametrize(
    ("before", "status", "stamp"),
    [("pending", "running", "running_at"), ("running", "done", "finished_at")],
)
def test_a_report_that_waited_for_a_restore_is_stamped_after_it(
    before: str,
    status: str,
    stamp: str,
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    rclient: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report's time was read before the API restored the shard, so a report that waited
    for a long restore was stamped (running_at, finished_at, the timeout's start) with the
    time from before it: a job ran for longer than it had, or ended before it was known to."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    register(api, shard_nodes(1)[0])  # the only node: every job is shard 1's
    job_id = submit(api, command="x")["job_id"]
    if before == "running":
        assert_json(report(api, job_id, "running"))
    snapshot_every_shard(settings)
    lose_redis_data(rclient, settings.for_shard(1).redis_prefix)
    restored: list[float] = []
    restore = hot.restore_at_start

    async def slow_restore(settings: Settings) -> bool:
        await asyncio.sleep(0.05)  # a restore takes its time
        done = await restore(settings)
        restored.append(time.time())
        return done

    monkeypatch.setattr(hot, "restore_at_start", slow_restore)
    ended = {"exit_code": 0} if status == "done" else {}
    job = assert_json(report(api, job_id, status, **ended))
    assert job["status"] == status and len(restored) == 1
    assert parse_rfc3339(job[stamp]) >= restored[0] - 0.001  # rfc3339 keeps microseconds
    if status == "running":
        started = rclient.zscore(Keys(settings.for_shard(1).redis_prefix).deadlines, job_id)
        assert started is not None and started >= restored[0] - 0.001


@pytest.mark.parametrize("shards", [1, SHARDS])
def test_a_token_agents_report_to_a_redis_that_lost_its_data_lands_once_it_registers_again(
    shards: int, serve: Serve, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """AGENT_AUTH=token: the node's token and its index of jobs went with the data, so the
    report's check of the caller refused it (401) before it could find the Redis not ready:
    the API never restored it, and the agent, registered again, got 404 for its job and
    dropped the result. A refusal in a Redis that lost its data is NOT_READY now: the API
    restores it, the agent's 401 makes it register again (tokens are not in the snapshot),
    and its retry lands. The reference agent's own calls (agent/remote.py), each step."""
    options = {"shards": shards, "api_key": KEY, "agent_auth": "token"}
    settings, url = make_settings(**options), serve(**options)
    lost = shards - 1
    node = shard_nodes(lost)[0]
    outcome = Outcome(exit_code=0, stdout="hi\n")

    async def agent_runs_a_job_through_the_loss() -> tuple[str, str, str]:
        config = AgentConfig(node_id=node, scheduler_url=url, registry_url=url, api_key=KEY)
        async with httpx.AsyncClient(timeout=60) as http:
            agent = Remote(config, http)
            assert await agent.register()
            first = agent.token
            made = await http.post(f"{url}/jobs", json={"command": "x"}, headers=OPERATOR)
            assert made.status_code == 201, made.text
            [job] = await agent.pending()
            assert await agent.claim(job)
            for k in range(shards):  # each shard's worker, its period come
                write_snapshot(settings.for_shard(k))
            lose_redis_data(rclient, settings.for_shard(lost).redis_prefix)
            await agent.report(job.job_id, outcome)
            return job.job_id, first, agent.token

    job_id, first, token = asyncio.run(agent_runs_a_job_through_the_loss())
    assert token and token != first  # registered again: the old token went with the data
    done = assert_json(httpx.get(f"{url}/jobs/{job_id}", headers=OPERATOR, timeout=60))
    assert (done["status"], done["exit_code"], done["stdout"]) == ("done", 0, outcome.stdout)


def test_a_running_worker_of_a_shard_that_restarted_empty_restores_it_and_goes_on(
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    rclient: redis.Redis,
    redis_url: str,
    prefix: str,
    db: Path,
) -> None:
    """Every key of shard 1 goes, its rq queues and the worker's own registration with them:
    the shard's running `scheduler worker --shard 1` restores it from scheduler-1.db at its
    next snapshot, and goes on snapshotting the shard's new jobs."""
    settings = make_settings(shards=SHARDS, node_ttl_secs=NODE_TTL)
    api = make_client(settings)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    first = [submit(api, command=f"a{i}")["job_id"] for i in range(6)]
    env = scheduler_env(redis_url, prefix, SCHEDULER_SHARDS=str(SHARDS), SCHEDULER_DB=str(db))
    env.update(SNAPSHOT_INTERVAL_SECS="1", NODE_TTL_SECS=str(NODE_TTL))
    file = db.with_name("scheduler-1.db")
    with (db.parent / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "worker", "--shard", "1"],
            env=env,
            stdout=log,
            stderr=log,
        )
    try:
        eventually(lambda: saved(file) == on_shard(first, 1), timeout=60)
        lose_redis_data(rclient, settings.for_shard(1).redis_prefix)
        eventually(lambda: stored(rclient, settings)[1] == on_shard(first, 1), timeout=60)
        later = [submit(api, command=f"b{i}")["job_id"] for i in range(6)]
        assert not set(later) & set(first)
        eventually(lambda: saved(file) == on_shard(first + later, 1), timeout=60)
    finally:
        stop(worker)
    assert listed(api) == by_number(first + later)
    assert "Traceback" not in (db.parent / "worker.log").read_text()


def saved(file: Path) -> set[str]:
    """The ids in a snapshot file a running worker writes: none yet while the file is not
    there, or is but without its jobs table (the writer's sqlite3.connect makes the file, its
    migration's transaction the table: rows() raised "no such table: jobs" in between)."""
    if not file.exists():
        return set()  # rows() would make it
    try:
        return set(rows(file))
    except sqlite3.OperationalError:  # not set up yet: asked again
        return set()


def on_shard(job_ids: list[str], shard: int) -> set[str]:
    return {job_id for job_id in job_ids if int(job_id.removeprefix("job-")) % SHARDS == shard}

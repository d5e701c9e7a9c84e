"""Real worker processes (`python -m scheduler worker`) against the real redis-server and real
HTTP fakes of SQS and SNS: several workers at once, an SNS outage, a worker SIGKILLed mid-work.

Each test counts what the fakes received, so "no duplicate" means what a subscriber saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store.keys import Keys
from tests import rq_state
from tests.conftest import ClientFactory, assert_json, register, report
from tests.fakes import FakeSNS, FakeSQS, ending_number, eventually
from tests.processes import scheduler_env, worker_burst
from workers import queues

BASE_ENV = {
    "SWEEP_INTERVAL_SECS": "1",
    "SQS_POLL_SECS": "0.5",
    "OUTBOX_FLUSH_SECS": "0.5",
    "SNAPSHOT_INTERVAL_SECS": "1",
    "JOB_TIMEOUT_SECS": "2",
    "HTTP_TIMEOUT_SECS": "2",
    "NODE_TTL_SECS": "600",
    "MAX_JOBS_PER_NODE": "100",
    "SNS_RETRY_BASE_SECS": "1",
    "SNS_RETRY_CAP_SECS": "1",
    "SNS_RETRY_MAX": "60",
}


class Workers:
    """Worker processes of one test, each in its own process group, logging to files."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **extra_env: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        with log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "scheduler", "worker"],
                env={**self.env, **extra_env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill(proc)

    def logs(self, tail: int = 3000) -> str:
        """The end of each worker's log (with tail=0: all of it)."""
        logs = (p.read_text(errors="replace") for p in self.log_dir.glob("*.log"))
        return "\n".join(text[-tail:] if tail else text for text in logs)


def log_lines(log: str, level: str, logger: str, containing: str) -> list[str]:
    """The lines of `log` (the CLI's format: time, level, logger, message) at `level` from
    `logger` that contain `containing`."""
    return [
        line for line in log.splitlines() if f" {level} {logger} " in line and containing in line
    ]


@pytest.fixture
def sqs() -> Iterator[FakeSQS]:
    with FakeSQS(visibility_secs=1.0) as fake:
        yield fake


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path, sqs: FakeSQS, sns: FakeSNS) -> dict[str, str]:
    return scheduler_env(
        redis_url,
        prefix,
        **BASE_ENV,
        SQS_URL=sqs.url,
        SNS_URL=sns.url,
        SCHEDULER_DB=str(tmp_path / "snapshot.db"),
        REGISTRY_URL="",
    )


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "n1", "n2")
    return client


def jobs_by_command(api: TestClient) -> Counter[str]:
    return Counter(job["command"] for job in assert_json(api.get("/jobs")))


def run_periods(rclient: redis.Redis, prefix: str, task: str) -> list[int]:
    return [int(entry.split()[0]) for entry in rclient.lrange(Keys(prefix).runs(task), 0, -1)]


def drained(rclient: redis.Redis, settings: Settings) -> bool:
    """Nothing left to publish: outbox empty, no publish queued, running or waiting."""
    keys = Keys(settings.redis_prefix)
    return (
        rclient.llen(keys.outbox) == 0
        and rq_state.queued(rclient, settings, queues.EVENTS) == 0
        and rq_state.registered(rclient, settings, queues.EVENTS, "wip") == 0
        and rq_state.registered(rclient, settings, queues.EVENTS, "scheduled") == 0
    )


def test_three_workers_one_run_per_period_no_duplicate_jobs_or_events(
    api: TestClient,
    workers: Workers,
    sqs: FakeSQS,
    sns: FakeSNS,
    rclient: redis.Redis,
    prefix: str,
    settings: Settings,
) -> None:
    commands = [f"echo {i}" for i in range(30)]
    for command in commands:
        sqs.send(json.dumps({"command": command}))
    sqs.lose_acks = 3  # three messages will be redelivered after their job was created
    for _ in range(3):
        workers.start()

    eventually(lambda: sqs.remaining() == 0, timeout=40)
    assert jobs_by_command(api) == Counter(commands)  # each message made exactly one job
    jobs = assert_json(api.get("/jobs"))
    for job in jobs[:15]:
        assert_json(report(api, job["job_id"], "running"))
        assert_json(report(api, job["job_id"], "done", exit_code=0))
    for job in jobs[15:]:
        assert_json(report(api, job["job_id"], "running"))  # left to time out (2 s)

    eventually(lambda: len(sns.published) >= 30, timeout=40)
    eventually(lambda: drained(rclient, settings), timeout=20)

    events = sns.events()
    assert len(events) == 30
    assert Counter(e["job_id"] for e in events) == Counter(j["job_id"] for j in jobs)
    assert Counter(e["status"] for e in events) == {"done": 15, "failed": 15}
    timed_out = assert_json(api.get(f"/jobs/{jobs[-1]['job_id']}"))
    assert (timed_out["status"], timed_out["stderr"]) == ("failed", "job timed out")
    assert len(sqs.log.lost_acks) == 3
    # Every delivery beyond the first of a message (3 lost acks at least) was acked as a
    # duplicate of the job it had already made.
    redeliveries = len(sqs.log.deliveries) - 30
    assert redeliveries >= 3
    assert int(rclient.hget(Keys(prefix).stats, "sqs_duplicates") or 0) == redeliveries
    for task in ("sweep", "sqs", "outbox"):
        periods = run_periods(rclient, prefix, task)
        assert len(periods) >= 2
        assert len(periods) == len(set(periods)), f"{task} ran twice in a period: {periods}"
    live = rq_state.worker_fields(rclient, settings, queues.PERIODIC, "successful_job_count")
    assert len(live) == 3
    print(
        f"MEASURED three workers: jobs={len(jobs)} events={len(events)} "
        f"sweeps={len(run_periods(rclient, prefix, 'sweep'))} "
        f"sqs_polls={len(run_periods(rclient, prefix, 'sqs'))} "
        f"redeliveries={redeliveries} duplicates=0 "
        f"jobs_per_worker={live}"
    )


def test_sns_outage_then_recovery_delivers_every_event_once(
    api: TestClient,
    workers: Workers,
    sns: FakeSNS,
    rclient: redis.Redis,
    settings: Settings,
) -> None:
    sns.failing = 500
    for _ in range(2):
        workers.start()
    job_ids = []
    for i in range(6):
        job_id = api.post("/jobs", json={"command": f"outage {i}"}).json()["job_id"]
        assert_json(report(api, job_id, "running"))
        assert_json(report(api, job_id, "done", exit_code=0))
        job_ids.append(job_id)

    eventually(lambda: sns.refused >= 12, timeout=30)  # every event tried, and retried
    sns.stop()  # then SNS is down altogether: connection refused
    failures = Keys(settings.redis_prefix).stats

    def failed_more() -> bool:
        return int(rclient.hget(failures, "publish_failures") or 0) >= sns.refused + 6

    eventually(failed_more, timeout=30)
    assert sns.published == []
    sns.failing = None
    sns.start()

    eventually(lambda: len(sns.published) >= 6, timeout=30)
    eventually(lambda: drained(rclient, settings), timeout=20)
    assert Counter(e["job_id"] for e in sns.events()) == Counter(job_ids)
    # Each failed attempt is one WARNING line of the worker that made it, without traceback.
    log = workers.logs(tail=0)
    failed_attempts = int(rclient.hget(failures, "publish_failures") or 0)
    refused = log_lines(log, "WARNING", "workers.worker", ": SNS answered 500: ")
    unreachable = log_lines(log, "WARNING", "workers.worker", ": SNS unreachable: ")
    assert refused and unreachable
    assert len(refused) + len(unreachable) == failed_attempts
    assert "Traceback" not in log
    assert " ERROR " not in log
    print(
        f"MEASURED SNS outage: refused={sns.refused} "
        f"failed_attempts={int(rclient.hget(failures, 'publish_failures') or 0)} "
        f"delivered={len(sns.published)} duplicates=0"
    )


def test_a_burst_worker_logs_sns_sqs_and_registry_outages_as_one_line_each(
    api: TestClient, env: dict[str, str], rclient: redis.Redis, settings: Settings
) -> None:
    job_id = api.post("/jobs", json={"command": "published later"}).json()["job_id"]
    assert_json(report(api, job_id, "running"))
    assert_json(report(api, job_id, "done", exit_code=0))
    down = "http://127.0.0.1:9"  # nothing listens: connection refused
    outage = {**env, "SNS_URL": down, "SQS_URL": down, "REGISTRY_URL": down, "SNS_RETRY_MAX": "1"}
    keys = Keys(settings.redis_prefix)
    number = ending_number(rclient, keys, job_id)
    event_job = keys.rq_job_id("event", number)

    first = worker_burst(outage).stderr  # each periodic task once, and the first publish
    assert "Traceback" not in first
    assert " ERROR " not in first
    assert len(log_lines(first, "WARNING", "workers.tasks", "registry not readable")) == 1
    assert len(log_lines(first, "WARNING", "workers.sqs", "receive failed")) == 1
    [attempt] = log_lines(first, "WARNING", "workers.worker", f"job {event_job}: ")
    assert f"job {event_job}: event {number}: SNS unreachable: " in attempt
    assert attempt.endswith("; retrying in 1 s, 0 retries remaining")

    later: list[str] = []

    def retried() -> bool:  # the retry is due 1 s later; a burst promotes it once it is
        later.append(worker_burst(outage).stderr)
        return "out of retries" in later[-1]

    eventually(retried, timeout=60, interval=0.2)
    assert not any("Traceback" in log for log in later)
    [given_up] = log_lines(later[-1], "ERROR", "workers.worker", f"job {event_job}: ")
    assert f"job {event_job}: event {number}: SNS unreachable: " in given_up
    assert given_up.endswith("; out of retries, given up")
    assert "".join(later).count(" ERROR ") == 1
    assert not log_lines("".join(later), "WARNING", "workers.worker", "")


@pytest.mark.parametrize("kill_during", ["sqs", "sns"])
def test_a_worker_killed_mid_work_loses_nothing(
    api: TestClient,
    workers: Workers,
    sqs: FakeSQS,
    sns: FakeSNS,
    rclient: redis.Redis,
    settings: Settings,
    kill_during: str,
) -> None:
    """SIGKILL while the worker waits on its first ack (the job is created, the ack never
    lands) or on its first publish (which never lands): another worker must finish the work,
    through SQS redelivery plus the idempotency key, or rq's recovery of the abandoned
    publish job plus its retry."""
    # The lease grace is the killed worker's (it set the lease when it started the job); the
    # maintenance interval is the survivor's, which finds the job abandoned.
    short_lease = {"WORKER_ABANDON_GRACE_SECS": "1", "WORKER_LOCK_SECS": "1"}
    recovery = {**short_lease, "WORKER_MAINTENANCE_SECS": "1"}
    job_ids = []
    for i in range(5):
        job_id = api.post("/jobs", json={"command": f"finished {i}"}).json()["job_id"]
        assert_json(report(api, job_id, "running"))
        assert_json(report(api, job_id, "done", exit_code=0))
        job_ids.append(job_id)
    commands = [f"queued {i}" for i in range(5)]
    for command in commands:
        sqs.send(json.dumps({"command": command}))
    stalled: FakeSQS | FakeSNS = sqs if kill_during == "sqs" else sns
    stalled.stall_secs = 3.0
    if kill_during == "sqs":
        sqs.lose_acks = 1
    else:
        sns.lose_publishes = 1
    first = workers.start(**short_lease)

    # Bounds for a loaded machine (a CI run at load 15 took over 60 s to start the second
    # worker and recover): they cost nothing when the work is done sooner.
    eventually(lambda: stalled.stalled > 0, timeout=120, interval=0.01)
    workers.kill(first)
    workers.start(**recovery)

    def all_done() -> bool:
        created = jobs_by_command(api)
        delivered = {e["job_id"] for e in sns.events()}
        everything = all(created[c] for c in commands) and delivered >= set(job_ids)
        return sqs.remaining() == 0 and everything

    eventually(all_done, timeout=180)
    eventually(lambda: drained(rclient, settings), timeout=60)
    created = jobs_by_command(api)
    assert all(created[c] == 1 for c in commands)  # no job lost, none made twice
    published = Counter(e["job_id"] for e in sns.events())
    assert published == Counter(job_ids)  # every event, once
    if kill_during == "sqs":
        assert len(sqs.log.lost_acks) == 1
        # The killed worker had received the five in one batch (workers/ingest.py BATCH) and
        # made their jobs: all five came back, each a duplicate, no new job.
        assert len(sqs.log.deliveries) == 10
    else:
        # rq found the killed worker's publish abandoned and retried it, once.
        keys = Keys(settings.redis_prefix)
        left = [
            rq_state.job_field(rclient, settings, keys.rq_job_id("event", n), "retries_left")
            for n in range(1, 6)
        ]
        assert left.count("59") == 1, left
    print(
        f"MEASURED SIGKILL during {kill_during}: jobs={sum(created[c] for c in commands)} "
        f"events={sum(published.values())} duplicates={sum(published.values()) - len(job_ids)}"
    )

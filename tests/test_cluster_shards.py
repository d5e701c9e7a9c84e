"""Issue 26, item 4: one deployment of SCHEDULER_SHARDS=3 on a real three-primary Redis Cluster
(tests/redis_cluster.py), through `scheduler serve` and HTTP only.

Spread: each shard's hash tag lands on a primary of its own (store/shards.py picks each
prefix in its own third of the slots), and the jobs and nodes split evenly between them, as
each primary's own keys show. Failover: a primary dies; the other two shards keep creating and
serving jobs throughout; its replica takes over and nothing acknowledged is lost or run twice.
A primary with no replica restarted empty: its shard comes back from its own snapshot file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.config import Settings
from scheduler.store.keys import Keys
from scheduler.store.shards import Layout, node_shard
from tests.fakes import eventually
from tests.processes import PortTaken, request_many, scheduler_env, wait_http
from tests.redis_cluster import Cluster, ClusterNode, redis_cluster
from tests.redis_server import free_port
from tests.test_cluster import slot_of
from tests.test_faults import Fleet

pytestmark = pytest.mark.cluster

SHARDS = 3
LAYOUT = Layout(SHARDS)
RECORD = re.compile(r"^\{(?P<tag>[^}]+)\}:job:(?P<id>job-\d+)$")
# Sent in parallel: the test's time is Redis' and the API's, not one round trip after another.
CONNECTIONS = 8
API_PROCESSES = 2  # `serve --workers`: every one of them started before the test goes on


@contextlib.contextmanager
def sharded_api(cluster: Cluster, prefix: str, tmp_path: Path, **extra: str) -> Iterator[str]:
    """`scheduler serve` of a deployment of SHARDS shards on `cluster`; yields its URL."""
    env = scheduler_env(
        cluster.url,
        prefix,
        SCHEDULER_SHARDS=str(SHARDS),
        AGENT_AUTH="open",
        NODE_TTL_SECS="600",  # every node stays live however slow the test runs
        SCHEDULER_DB=str(tmp_path / "snap.db"),
        **extra,
    )
    fleet = Fleet(env, tmp_path)
    try:
        for attempt in range(3):
            url = f"http://127.0.0.1:{free_port()}"
            port = url.rsplit(":", 1)[1]
            workers = ("--workers", str(API_PROCESSES))
            fleet.start("api", "serve", *workers, "--host", "127.0.0.1", "--port", port)
            try:
                wait_http(f"{url}/health", proc=fleet.procs["api"])
                break
            except PortTaken:
                if attempt == 2:
                    raise
        # /health answers once one process has started: every one has, before the test goes
        # on, so which processes serve what follows does not depend on the machine's speed.
        eventually(lambda: started(fleet) == API_PROCESSES, timeout=30)
        yield url
    finally:
        fleet.stop_all()
    # Reached when the test's body passed: a refusal is a 503 the API answers, not a crash.
    assert "Traceback" not in fleet.log_tail("api", 10**6), fleet.log_tail("api")


def started(fleet: Fleet) -> int:
    """The API processes that have started (a port taken fails in the parent, before any)."""
    return fleet.log_tail("api", 10**6).count("Application startup complete.")


def shard_prefixes(prefix: str) -> list[str]:
    """Each shard's REDIS_PREFIX, as the deployment's settings name them."""
    settings = Settings.from_env({"REDIS_PREFIX": prefix, "SCHEDULER_SHARDS": str(SHARDS)})
    return [settings.for_shard(k).redis_prefix for k in range(SHARDS)]


def send(url: str, requests: list[tuple[str, str, Any]]) -> list[tuple[int, bytes]]:
    """(method, path, JSON body or None) each; the (status, body) answers in order."""
    raw = [(m, p, b"" if body is None else json.dumps(body).encode()) for m, p, body in requests]
    return asyncio.run(request_many([url], raw, CONNECTIONS))


def register(url: str, node_ids: list[str]) -> None:
    bodies = [{"id": n, "hostname": n, "cpu_count": 1, "role": "compute"} for n in node_ids]
    answers = send(url, [("POST", "/nodes/register", body) for body in bodies])
    assert [code for code, _ in answers] == [201] * len(node_ids), answers[:3]


def submit(url: str, commands: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """POST /jobs of each command: (status, the job when 201)."""
    answers = send(url, [("POST", "/jobs", {"command": c}) for c in commands])
    return [(code, json.loads(body) if code == 201 else {}) for code, body in answers]


def created(url: str, commands: list[str]) -> list[dict[str, Any]]:
    """POST /jobs of each command, every one answered 201: the jobs."""
    answers = submit(url, commands)
    assert [code for code, _ in answers] == [201] * len(commands)
    return [job for _, job in answers]


def polled(url: str, node_ids: list[str]) -> dict[str, list[str]]:
    """Each node's pending jobs, as its agent polls for them."""
    paths = [("GET", f"/jobs?node_id={n}&status=pending", None) for n in node_ids]
    answers = send(url, paths)
    assert {code for code, _ in answers} <= {200}, answers
    pairs = zip(node_ids, answers, strict=True)
    return {n: [job["job_id"] for job in json.loads(body)] for n, (_, body) in pairs}


def report(url: str, jobs: list[dict[str, Any]], status: str) -> None:
    """PATCH each job to `status` as its node's agent; each must be answered 200."""
    body = {"status": status, "exit_code": 0}
    requests = [("PATCH", f"/jobs/{j['job_id']}", {**body, "node_id": j["node_id"]}) for j in jobs]
    answers = send(url, requests)
    assert [code for code, _ in answers] == [200] * len(jobs), answers


def run_lives(url: str, jobs: list[dict[str, Any]]) -> None:
    """Each job's life as its agent sees it: found by its node's poll, running, done."""
    found = polled(url, sorted({j["node_id"] for j in jobs}))
    for job in jobs:
        assert job["job_id"] in found[job["node_id"]], job
    report(url, jobs, "running")
    report(url, jobs, "done")


def fetched(url: str, job_ids: list[str]) -> list[tuple[int, dict[str, Any]]]:
    answers = send(url, [("GET", f"/jobs/{job_id}", None) for job_id in job_ids])
    return [(code, json.loads(body) if code == 200 else {}) for code, body in answers]


def within_a_tenth(counts: list[int], total: int) -> bool:
    share = total / SHARDS
    return len(counts) == SHARDS and all(abs(c - share) <= share / 10 for c in counts)


def shard_keys(node: ClusterNode) -> dict[str, set[str]]:
    """The job records on one primary, by the hash tag they carry."""
    found: dict[str, set[str]] = {}
    for key in node.client().scan_iter(match="{*}:job:job-*", count=1000):
        if matched := RECORD.match(key.decode()):
            found.setdefault(matched["tag"], set()).add(matched["id"])
    return found


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with redis_cluster() as c:
        yield c


def test_jobs_and_nodes_spread_evenly_over_the_three_primaries(
    cluster: Cluster, prefix: str, tmp_path: Path
) -> None:
    prefixes = shard_prefixes(prefix)
    owners = [cluster.owner(slot_of(p)) for p in prefixes]
    assert len(set(owners)) == SHARDS, "each shard's tag on a primary of its own"
    # Rendezvous hashing of these fixed ids (600: enough for a tenth's spread).
    node_ids = [f"node-{i}" for i in range(600)]
    expected_nodes = {k: {n for n in node_ids if node_shard(n, SHARDS) == k} for k in range(SHARDS)}
    assert within_a_tenth([len(expected_nodes[k]) for k in range(SHARDS)], len(node_ids))

    with sharded_api(cluster, prefix, tmp_path) as url:
        register(url, node_ids)
        jobs = created(url, [f"echo {i}" for i in range(300)])
        for job in jobs:  # a job is placed on a node of its own shard
            assert node_shard(job["node_id"], SHARDS) == LAYOUT.job_shard(job["job_id"]), job
        run_lives(url, jobs)
        assert {j["status"] for _, j in fetched(url, [j["job_id"] for j in jobs])} == {"done"}

    ids = {job["job_id"] for job in jobs}
    assert len(ids) == len(jobs)
    for k, (shard_prefix, owner) in enumerate(zip(prefixes, owners, strict=True)):
        keys, r = Keys(shard_prefix), owner.client()
        records = shard_keys(owner)
        # This primary holds this shard's records alone, and each is a job-N of N mod 3 = k.
        assert set(records) == {shard_prefix}, set(records)
        assert {LAYOUT.job_shard(job_id) for job_id in records[shard_prefix]} == {k}
        assert r.zcard(keys.status("done")) == len(records[shard_prefix])
        assert {n.decode() for n in r.hkeys(keys.nodes)} == expected_nodes[k]
    per_primary = [shard_keys(owner)[p] for p, owner in zip(prefixes, owners, strict=True)]
    assert set().union(*per_primary) == ids
    assert within_a_tenth([len(found) for found in per_primary], len(ids)), per_primary


@pytest.fixture
def replicated() -> Iterator[Cluster]:
    """One replica per primary. A cluster that keeps serving the slots it still has while a
    primary is down (by default every node refuses every slot once one is unserved): what a
    sharded deployment runs on for its other shards to carry on. A replica takes over however
    long its primary has been down: by default one whose link went down more than about 30 s
    ago (10 node timeouts and the ping period) never does, and hold_failover's outage lasts
    as long as the machine takes to run the test's requests."""
    extra = ("--cluster-require-full-coverage", "no", "--cluster-replica-validity-factor", "0")
    with redis_cluster(replicas=1, extra=extra) as c:
        yield c


def by_shard(jobs: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {k: [] for k in range(SHARDS)}
    for job in jobs:
        found[LAYOUT.job_shard(job["job_id"])].append(job)
    return found


def on(jobs: list[dict[str, Any]], shards: set[int]) -> list[dict[str, Any]]:
    return [job for job in jobs if LAYOUT.job_shard(job["job_id"]) in shards]


def on_every_shard(url: str) -> list[dict[str, Any]]:
    """New jobs, a round at a time, until every shard has one: the API learns again that a
    shard has live nodes within its cache's time, not at once."""
    made: list[dict[str, Any]] = []

    def every_shard() -> bool:
        made.extend(created(url, [f"after {len(made) + i}" for i in range(SHARDS)]))
        return all(by_shard(made).values())

    eventually(every_shard, timeout=30, interval=0.2)
    return made


def hold_failover(replica: ClusterNode, held: bool) -> None:
    """While held, the replica does not take over from its failed primary: the outage lasts
    as long as the test needs to look at it, whatever the machine's speed."""
    replica.client().config_set("cluster-replica-no-failover", "yes" if held else "no")


def test_a_primary_failover_stops_only_its_shard_and_loses_and_repeats_nothing(
    replicated: Cluster, prefix: str, tmp_path: Path
) -> None:
    cluster = replicated
    dead_slot = slot_of(shard_prefixes(prefix)[1])
    dead, others = {1}, {0, 2}  # shard 1's primary dies
    primary = cluster.owner(dead_slot)
    replica = cluster.replicas[cluster.nodes.index(primary)]
    node_ids = [f"node-{i}" for i in range(30)]
    assert {node_shard(n, SHARDS) for n in node_ids} == set(range(SHARDS))
    # Every change is on the replica before it is acknowledged (DEPLOYMENT.md, Redis with replicas).
    extra = {"REDIS_MIN_REPLICAS_ACKED": "1", "MAX_JOBS_PER_NODE": "100"}

    with sharded_api(cluster, prefix, tmp_path, **extra) as url:
        register(url, node_ids)
        # Before: on every shard, jobs done, running and pending.
        before = by_shard(created(url, [f"before {i}" for i in range(9 * SHARDS)]))
        assert all(len(before[k]) >= 6 for k in range(SHARDS)), before
        done = [j for k in range(SHARDS) for j in before[k][:3]]
        running = [j for k in range(SHARDS) for j in before[k][3:6]]
        pending = [j for k in range(SHARDS) for j in before[k][6:]]
        run_lives(url, done)
        report(url, running, "running")

        hold_failover(replica, True)
        cluster.kill(primary)
        eventually(lambda: cluster.failed(primary), timeout=30, interval=0.1)

        # During: the other shards' jobs are read, made, claimed and finished; only the dead
        # shard's requests are refused, with a 503.
        alive_ids = [j["job_id"] for j in on(done + running + pending, others)]
        assert {code for code, _ in fetched(url, alive_ids)} == {200}
        dead_ids = [j["job_id"] for j in on(done + running + pending, dead)]
        assert {code for code, _ in fetched(url, dead_ids)} == {503}
        answers = submit(url, [f"during {i}" for i in range(6 * SHARDS)])
        assert {code for code, _ in answers} <= {201, 503}, answers
        during = [job for code, job in answers if code == 201]
        assert on(during, others) == during, during
        assert all(by_shard(during)[k] for k in others), answers
        run_lives(url, during)
        # An API process started during the outage (a restart, a scale-up) serves the other
        # shards too: its start needs shard 0 alone.
        (tmp_path / "late").mkdir()
        with sharded_api(cluster, prefix, tmp_path / "late", **extra) as late:
            answers = submit(late, [f"late {i}" for i in range(3 * SHARDS)])
            later = [job for code, job in answers if code == 201]
            assert later and on(later, others) == later, answers
            run_lives(late, later)
        during += later
        report(url, on(running, others), "done")
        # All of it while the shard was down: its slot still the dead primary's.
        assert cluster.owner(dead_slot) == primary and cluster.failed(primary)

        hold_failover(replica, False)
        eventually(lambda: cluster.owner(dead_slot) == replica, timeout=30)
        # The old primary comes back empty, as the new one's replica: until it has synced no
        # change can be acknowledged (REDIS_MIN_REPLICAS_ACKED=1).
        cluster.restart(primary)
        # Just restarted, it may still report itself a primary, with no link to report.
        eventually(
            lambda: primary.client().info("replication").get("master_link_status") == "up",
            timeout=30,
        )
        eventually(lambda: {c for c, _ in fetched(url, dead_ids)} == {200}, timeout=30)

        # After: every acknowledged job is there as it was left, and none is offered again.
        acknowledged = done + running + pending + during
        answers_now = fetched(url, [j["job_id"] for j in acknowledged])
        assert {code for code, _ in answers_now} == {200}, answers_now
        now = {job["job_id"]: job for _, job in answers_now}
        assert {i: now[i]["command"] for i in now} == {
            j["job_id"]: j["command"] for j in acknowledged
        }
        expected = {j["job_id"]: "done" for j in done + during + on(running, others)}
        expected |= {j["job_id"]: "running" for j in on(running, dead)}
        expected |= {j["job_id"]: "pending" for j in pending}
        assert {i: now[i]["status"] for i in now} == expected
        offered = polled(url, node_ids)
        assert sorted(i for ids in offered.values() for i in ids) == sorted(
            j["job_id"] for j in pending
        )
        # The dead shard serves again: its running jobs finish, its pending ones run once.
        report(url, on(running, dead), "done")
        run_lives(url, pending)
        run_lives(url, on_every_shard(url))
        assert polled(url, node_ids) == {n: [] for n in node_ids}


@pytest.fixture
def uncovered() -> Iterator[Cluster]:
    """No replica: a primary that dies loses its data. The others serve meanwhile."""
    with redis_cluster(extra=("--cluster-require-full-coverage", "no")) as c:
        yield c


def test_a_primary_restarted_empty_gets_its_shard_back_from_its_file(
    uncovered: Cluster, prefix: str, tmp_path: Path
) -> None:
    """Shard 1's primary, with no replica, is killed and starts again empty. The shard comes
    back from its own file (`scheduler snapshot --shard 1` wrote it before): its jobs as
    they were, its running jobs' reports land, its nodes register again, new ids collide
    with none; nothing is answered 500, the other shards serve throughout."""
    cluster = uncovered
    lost_slot = slot_of(shard_prefixes(prefix)[1])
    primary = cluster.owner(lost_slot)
    node_ids = [f"node-{i}" for i in range(30)]
    ones = [n for n in node_ids if node_shard(n, SHARDS) == 1]
    env = scheduler_env(
        cluster.url, prefix, SCHEDULER_SHARDS=str(SHARDS), SCHEDULER_DB=str(tmp_path / "snap.db")
    )
    with sharded_api(cluster, prefix, tmp_path, MAX_JOBS_PER_NODE="100") as url:
        register(url, node_ids)
        jobs = created(url, [f"before {i}" for i in range(9 * SHARDS)])
        lost = by_shard(jobs)[1]
        assert len(lost) >= 6, jobs
        done, running = lost[:2], lost[2:4]
        run_lives(url, done)
        report(url, running, "running")
        snap = subprocess.run(
            [sys.executable, "-m", "scheduler", "snapshot", "--shard", "1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert snap.returncode == 0, snap.stderr

        cluster.kill(primary)
        others = [j["job_id"] for j in on(jobs, {0, 2})]
        assert {code for code, _ in fetched(url, others)} == {200}
        answers = submit(url, [f"during {i}" for i in range(3 * SHARDS)])
        assert {code for code, _ in answers} <= {201, 503}, answers
        during = [job for code, job in answers if code == 201]
        cluster.restart(primary)
        assert cluster.owner(lost_slot) == primary and primary.client().dbsize() == 0
        # Until it has met the others again it answers CLUSTERDOWN (a 503, retried).
        eventually(lambda: primary.client().cluster("INFO")["cluster_state"] == "ok")

        report(url, running, "done")  # before any worker: the API restores the shard
        register(url, ones)  # their agents, whose heartbeat found them gone
        answers_now = fetched(url, [j["job_id"] for j in jobs + during])
        assert {code for code, _ in answers_now} == {200}, answers_now
        now = {job["job_id"]: job for _, job in answers_now}
        expected = {j["job_id"]: "pending" for j in jobs + during}
        expected |= {j["job_id"]: "done" for j in done + running}
        assert {i: job["status"] for i, job in now.items()} == expected
        later = on_every_shard(url)
        assert not {j["job_id"] for j in later} & set(now)
        run_lives(url, on(jobs, {1})[4:] + later)

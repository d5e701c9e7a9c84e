"""The job state machine (our deliberate improvement over CONTRACT 2.4 step 7), the retry and
normal branches of PATCH (2.4 steps 4-5), the agent poll's capacity rule, and the Redis keys
the Lua scripts leave behind."""

from __future__ import annotations

import inspect
import itertools
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.models.job import STATUSES
from scheduler.store.keys import Keys
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    Json,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)
from tests.records import stored_record

# Each test runs through ASGI and through the hot lane (tests/conftest.py, front).
pytestmark = BOTH_FRONTS


def job_in(api: TestClient, state: str) -> Json:
    """A fresh job on n1 driven to `state` through the agent's reports."""
    job = submit(api, command="work")
    if state != "pending":
        job = assert_json(report(api, job["job_id"], "running"))
    if state in ("done", "failed"):
        code = 0 if state == "done" else 1
        job = assert_json(report(api, job["job_id"], state, exit_code=code, stdout="o"))
        assert job["status"] == state
    return job


def get(api: TestClient, job_id: str) -> Json:
    job: Json = assert_json(api.get(f"/jobs/{job_id}"))
    return job


def poll(api: TestClient, node_id: str = "n1") -> list[str]:
    jobs = assert_json(api.get(f"/jobs?node_id={node_id}&status=pending"))
    return [job["job_id"] for job in jobs]


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    """One node, failures final (MAX_JOB_RETRIES=0), room for several running jobs."""
    client = make_client(max_job_retries=0, max_jobs_per_node=10)
    register(client, "n1")
    return client


@pytest.mark.parametrize(
    "state, status, code, result",
    [
        ("pending", "running", 200, "running"),
        ("pending", "done", 409, "job is not running"),
        ("pending", "failed", 409, "job is not running"),
        ("running", "running", 409, "job already running"),
        ("running", "done", 200, "done"),
        ("running", "failed", 200, "failed"),
        ("done", "running", 409, "job already finished"),
        ("done", "done", 409, "job already finished"),
        ("done", "failed", 409, "job already finished"),
        ("failed", "running", 409, "job already finished"),
        ("failed", "done", 409, "job already finished"),
        ("failed", "failed", 409, "job already finished"),
    ],
)
def test_transition_table(api: TestClient, state: str, status: str, code: int, result: str) -> None:
    job = job_in(api, state)
    listed = {
        s: api.get(f"/jobs?status={s}").json() for s in ("pending", "running", "done", "failed")
    }
    response = report(api, job["job_id"], status, exit_code=7, stdout="late", stderr="late")
    if code == 200:
        assert assert_json(response)["status"] == result
        assert get(api, job["job_id"])["status"] == result
        return
    assert_text_error(response, code, result)
    assert get(api, job["job_id"]) == job  # nothing changed, field by field
    assert {s: api.get(f"/jobs?status={s}").json() for s in listed} == listed


def test_running_report_fills_running_at_and_keeps_the_rest(api: TestClient) -> None:
    job = submit(api, command="x", env_vars={"A": "1"}, port=80)
    running = assert_json(report(api, job["job_id"], "running"))
    assert running == {**job, "status": "running", "running_at": running["running_at"]}
    assert running["running_at"] >= job["created_at"]


@pytest.mark.parametrize("agent_stderr, kept_stderr", [("boom", "boom"), ("", "warn")])
def test_retry_branch(make_client: ClientFactory, agent_stderr: str, kept_stderr: str) -> None:
    api = make_client()  # MAX_JOB_RETRIES=1, as the original
    register(api, "n1", "n2")
    job_id = submit(api, command="flaky")["job_id"]
    running = assert_json(report(api, job_id, "running", stdout="partial", stderr="warn"))
    retried = assert_json(
        report(api, job_id, "failed", exit_code=3, stdout="out", stderr=agent_stderr)
    )
    assert retried == {
        "job_id": job_id,
        "node_id": running["node_id"],  # the same node
        "command": "flaky",
        "status": "pending",
        "retry_count": 1,
        "created_at": running["created_at"],
        "running_at": running["running_at"],  # kept
        "stderr": kept_stderr,  # replaced only by a non-empty one
    }  # exit_code, stdout and finished_at cleared
    assert get(api, job_id) == retried
    assert poll(api, retried["node_id"]) == [job_id]
    assert api.get("/jobs?status=failed").json() == []
    again = assert_json(report(api, job_id, "running"))
    assert again["running_at"] >= running["running_at"]
    final = assert_json(report(api, job_id, "failed", exit_code=4, stderr=""))
    assert final["status"] == "failed" and final["retry_count"] == 1
    assert final["exit_code"] == 4 and final["stderr"] == kept_stderr and "stdout" not in final
    assert "finished_at" in final


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_max_job_retries_is_respected(make_client: ClientFactory, retries: int) -> None:
    api = make_client(max_job_retries=retries)
    register(api, "n1")
    job_id = submit(api, command="false")["job_id"]
    reports = 0
    while reports <= retries + 1:
        assert_json(report(api, job_id, "running"))
        job = assert_json(report(api, job_id, "failed", exit_code=1))
        reports += 1
        if job["status"] == "failed":
            break
        assert job == {**job, "status": "pending", "retry_count": reports}
    assert reports == retries + 1
    assert job["retry_count"] == retries and job["exit_code"] == 1


@pytest.mark.parametrize(
    "on_running, on_final, expected",
    [
        ({}, {"exit_code": 0}, {"exit_code": 0}),
        ({}, {}, {}),
        (
            {},
            {"exit_code": 2, "stdout": "o", "stderr": "e"},
            {"exit_code": 2, "stdout": "o", "stderr": "e"},
        ),
        ({"stdout": "so far"}, {}, {"stdout": "so far"}),
        (
            {"stdout": "so far", "stderr": "warn"},
            {"stdout": "all"},
            {"stdout": "all", "stderr": "warn"},
        ),
        ({"stderr": "warn"}, {"exit_code": 0}, {"exit_code": 0, "stderr": "warn"}),
        ({"exit_code": 5}, {}, {"exit_code": 5}),
        ({"exit_code": 5}, {"exit_code": 0}, {"exit_code": 0}),
    ],
)
def test_normal_branch_never_clears_with_empty_values(
    api: TestClient, on_running: Json, on_final: Json, expected: Json
) -> None:
    """Every report carries all four keys, as the agent sends them; empty means "no news"."""
    empty: Json = {"exit_code": None, "stdout": "", "stderr": ""}
    job_id = submit(api, command="x")["job_id"]
    assert_json(report(api, job_id, "running", **{**empty, **on_running}))
    final = assert_json(report(api, job_id, "done", **{**empty, **on_final}))
    assert {k: final[k] for k in empty if k in final} == expected
    assert get(api, job_id) == final


# The agent poll: at most the node's free capacity, oldest first; services do not count.


@pytest.mark.parametrize(
    "max_jobs, running, pending, expected",
    [
        (1, 0, 3, 1),
        (1, 1, 3, 0),
        (2, 1, 3, 1),
        (3, 0, 5, 3),
        (3, 2, 5, 1),
        (3, 3, 5, 0),
        (4, 0, 2, 2),
        (4, 1, 0, 0),
    ],
)
def test_poll_returns_free_capacity_oldest_first(
    make_client: ClientFactory, max_jobs: int, running: int, pending: int, expected: int
) -> None:
    api = make_client(max_jobs_per_node=max_jobs)
    register(api, "n1")
    job_ids = [submit(api, command=f"c{i}")["job_id"] for i in range(running + pending)]
    for job_id in job_ids[:running]:
        assert_json(report(api, job_id, "running"))
    assert poll(api) == job_ids[running : running + expected]
    assert api.get("/jobs?node_id=n1&status=pending").content.endswith(b"]\n")


def test_poll_sees_only_its_node(make_client: ClientFactory) -> None:
    api = make_client(max_jobs_per_node=5)
    register(api, "n1", "n2")
    placed = [submit(api, command=f"c{i}") for i in range(4)]
    mine = [job["job_id"] for job in placed if job["node_id"] == "n2"]
    assert poll(api, "n2") == mine
    assert poll(api, "n9") == []


def test_finishing_a_job_frees_capacity(make_client: ClientFactory) -> None:
    api = make_client()
    register(api, "n1")
    first, second = submit(api, command="a")["job_id"], submit(api, command="b")["job_id"]
    assert poll(api) == [first]
    assert_json(report(api, first, "running"))
    assert poll(api) == []
    assert_json(report(api, first, "done", exit_code=0))
    assert poll(api) == [second]


def test_service_jobs_do_not_count_against_capacity(make_client: ClientFactory) -> None:
    api = make_client()  # MAX_JOBS_PER_NODE=1
    register(api, "n1")
    service = submit(api, command="serve", job_type="service", port=8080)["job_id"]
    run = submit(api, command="batch", job_type="run")["job_id"]
    assert poll(api) == [service]
    assert_json(report(api, service, "running"))
    assert poll(api) == [run]
    assert_json(report(api, run, "running"))
    assert poll(api) == []
    assert_json(report(api, service, "done", exit_code=0))
    assert poll(api) == []  # the run job still fills the node


# The keys the Lua scripts create are exactly the ones keys.py names.


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _keys_of(rclient: redis.Redis, keys: Keys) -> dict[str, str]:
    """Every key under the test's prefix, with its Redis type."""
    return {_text(name): _text(rclient.type(name)) for name in rclient.scan_iter(keys.pattern())}


def named_keys(keys: Keys, words: list[str]) -> set[str]:
    """Every key a `Keys` helper names, with each string argument drawn from `words`."""
    named: set[str] = set()
    for name in dir(Keys):
        attr = getattr(Keys, name)
        if name.startswith("_") or name in ("root", "pattern"):
            continue
        if isinstance(attr, property):
            named.add(getattr(keys, name))
        elif inspect.isfunction(attr):
            params = list(inspect.signature(attr).parameters.values())[1:]
            if all(p.annotation in ("str", str) for p in params):
                for args in itertools.product(words, repeat=len(params)):
                    named.add(attr(keys, *args))
            elif [p.annotation for p in params] in (["int"], [int]):
                # A minute's series (Keys.series): the minutes around the test's run.
                minute = int(time.time()) // 60
                named.update(attr(keys, m) for m in range(minute - 60, minute + 61))
    return {key for key in named if key.startswith(keys.root)}


def test_scripts_use_the_keys_that_keys_py_names(
    make_client: ClientFactory, rclient: redis.Redis, prefix: str
) -> None:
    api = make_client()
    k = Keys(prefix)
    # A registered node's label sets: its implicit labels (models/labels.py); "": the default
    # namespace as stored (its indexes, keys.py namespace_jobs).
    words = ["job-1", "n1", "node.id=n1", "node.hostname=n1", "cpus", "memory_mb", ""]
    named = named_keys(k, [*words, *STATUSES])

    def check(required: dict[str, str]) -> None:
        found = _keys_of(rclient, k)
        assert set(found) <= named, f"keys no helper names: {sorted(set(found) - named)}"
        assert {key: found.get(key) for key in required} == required

    def members(key: str) -> list[str]:
        if _text(rclient.type(key)) == "set":
            return sorted(_text(m) for m in rclient.smembers(key))
        return [_text(m) for m in rclient.zrange(key, 0, -1) if isinstance(m, bytes | str)]

    register(api, "n1")
    check({k.nodes: "hash", k.nodes_seen: "zset", k.nodes_compute: "zset"})

    submit(api, command="x")
    check(
        {
            k.job_seq: "string",
            k.rr_seq: "string",
            k.job("job-1"): "string",
            k.all_jobs: "zset",
            k.status("pending"): "zset",
            k.node_jobs("n1"): "zset",
            k.node_status("n1", "pending"): "zset",
            k.dirty: "set",
        }
    )
    assert members(k.node_status("n1", "pending")) == ["job-1"]

    assert_json(report(api, "job-1", "running"))
    check(
        {
            k.status("running"): "zset",
            k.node_status("n1", "running"): "zset",
            k.node_busy("n1"): "set",
            k.deadlines: "zset",
        }
    )
    assert members(k.node_busy("n1")) == members(k.deadlines) == ["job-1"]
    assert members(k.status("pending")) == members(k.node_status("n1", "pending")) == []

    assert_json(report(api, "job-1", "done", exit_code=0))
    check(
        {
            k.status("done"): "zset",
            k.node_status("n1", "done"): "zset",
            k.outbox: "list",
            k.event_seq: "string",
            k.finished: "zset",
        }
    )
    assert members(k.finished) == ["job-1"]
    assert members(k.node_busy("n1")) == members(k.deadlines) == []
    assert members(k.status("running")) == members(k.node_status("n1", "running")) == []
    assert members(k.node_status("n1", "done")) == members(k.status("done")) == ["job-1"]
    assert stored_record(rclient, k, "job-1") == api.get("/jobs/job-1").content.rstrip(b"\n")
    assert rclient.zrange(k.all_jobs, 0, -1, withscores=True) == [(b"job-1", 1.0)]
    assert b"job-1" in rclient.smembers(k.dirty)


def test_concurrent_claims_have_one_winner(make_client: ClientFactory) -> None:
    """Two agents with one node id (hostnames get reused) race for a job: one runs it."""
    api = make_client(max_jobs_per_node=10)
    register(api, "n1")
    job_ids = [submit(api, command=f"c{i}")["job_id"] for i in range(4)]
    claims = [job_id for job_id in job_ids for _ in range(6)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        codes = list(pool.map(lambda job_id: report(api, job_id, "running").status_code, claims))
    for n, job_id in enumerate(job_ids):
        assert sorted(codes[6 * n : 6 * n + 6]) == [200] + [409] * 5, job_id
        assert get(api, job_id)["status"] == "running"
    assert poll(api) == []


# Repeats whose first answer was lost (issue #11, item 2): the reference agent sends its
# node_id; the Rust agent's bare claim keeps the 409.


def test_a_repeated_claim_by_the_holding_node_answers_the_job(api: TestClient) -> None:
    job = job_in(api, "pending")
    first = assert_json(report(api, job["job_id"], "running", node_id="n1"))
    events_before = api.get("/jobs?status=running").json()

    again = assert_json(report(api, job["job_id"], "running", node_id="n1"))

    assert again == first == get(api, job["job_id"])  # nothing changed, running_at included
    assert api.get("/jobs?status=running").json() == events_before
    assert_text_error(report(api, job["job_id"], "running"), 409, "job already running")


def test_a_report_from_another_node_is_refused(api: TestClient) -> None:
    register(api, "n2")
    job = job_in(api, "pending")
    assert job["node_id"] == "n1"
    refused = report(api, job["job_id"], "running", node_id="n2")
    assert_text_error(refused, 409, "job is bound to another node")
    assert get(api, job["job_id"]) == job
    assert_json(report(api, job["job_id"], "running", node_id="n1"))
    done = report(api, job["job_id"], "done", exit_code=0, node_id="n2")
    assert_text_error(done, 409, "job is bound to another node")


@pytest.mark.parametrize("node_id", ["n1", None])
def test_a_repeated_final_report_identical_to_the_stored_one_answers_200(
    api: TestClient, rclient: redis.Redis, prefix: str, node_id: str | None
) -> None:
    job = job_in(api, "running")
    sender = {"node_id": node_id} if node_id else {}
    final = {"exit_code": 3, "stdout": "out", "stderr": "err", **sender}
    stored = assert_json(report(api, job["job_id"], "failed", **final))
    outbox = rclient.lrange(Keys(prefix).outbox, 0, -1)

    assert assert_json(report(api, job["job_id"], "failed", **final)) == stored
    assert assert_json(report(api, job["job_id"], "failed", **{**final, "stdout": ""})) == stored
    assert get(api, job["job_id"]) == stored
    assert rclient.lrange(Keys(prefix).outbox, 0, -1) == outbox  # no second event
    for different in ({"exit_code": 4}, {"stdout": "other"}, {"stderr": "other"}):
        response = report(api, job["job_id"], "failed", **{**final, **different})
        assert_text_error(response, 409, "job already finished")
    assert_text_error(report(api, job["job_id"], "done", **final), 409, "job already finished")
    assert get(api, job["job_id"]) == stored


def test_a_bad_node_id_in_a_report_is_400(api: TestClient) -> None:
    job = job_in(api, "pending")
    response = report(api, job["job_id"], "running", node_id="../n1")
    assert response.status_code == 400 and response.text.startswith("invalid node_id")
    assert get(api, job["job_id"]) == job

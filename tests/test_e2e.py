"""The whole product in processes: the test's redis-server, an API process, a worker and the
reference agent. Jobs are submitted over HTTP and checked as a client would see them."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import signal
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import api_replicas, scheduler_env, stop

NODE = "e2e-node"
Job = dict[str, Any]


@dataclass
class Stack:
    url: str
    agent: subprocess.Popen[bytes]
    logs: Path
    env: dict[str, str]

    def submit(self, **body: Any) -> Job:
        response = httpx.post(f"{self.url}/jobs", json=body)
        assert response.status_code == 201, response.text
        job: Job = response.json()
        return job

    def job(self, job_id: str) -> Job:
        job: Job = httpx.get(f"{self.url}/jobs/{job_id}").json()
        return job

    def wait(self, job_id: str, until: Callable[[Job], bool], timeout: float = 30) -> Job:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if until(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"{job_id} stuck at {job}\n{self.log_tail()}")
            time.sleep(0.1)

    def final(self, job_id: str, timeout: float = 30) -> Job:
        return self.wait(job_id, lambda job: job["status"] in ("done", "failed"), timeout)

    def log_tail(self) -> str:
        return "".join(p.read_text(errors="replace")[-3000:] for p in self.logs.glob("*.log"))


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler", *args], env=env, stdout=out, stderr=out
        )


def _wait_node(url: str, agent: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert agent.poll() is None, "the agent exited"
        nodes = httpx.get(f"{url}/nodes").json()
        if nodes.get(NODE, {}).get("status") == "healthy":
            return
        time.sleep(0.1)
    raise AssertionError("the agent did not register")


@contextlib.contextmanager
def stack(redis_url: str, tmp: Path, **overrides: str) -> Iterator[Stack]:
    settings = {
        "AGENT_POLL_SECS": "0.2",
        "AGENT_HEARTBEAT_SECS": "1",
        "AGENT_GRACE_SECS": "5",
        "AGENT_WORK_DIR": str(tmp / "work"),
        "SCHEDULER_DB": str(tmp / "scheduler.db"),
    }
    env = scheduler_env(redis_url, f"e2e{uuid.uuid4().hex[:10]}", **{**settings, **overrides})
    with api_replicas(1, env) as urls:
        env["SCHEDULER_URL"] = urls[0]
        worker = _spawn(["worker"], env, tmp / "worker.log")
        agent = _spawn(["agent", "--node-id", NODE], env, tmp / "agent.log")
        try:
            _wait_node(urls[0], agent)
            yield Stack(urls[0], agent, tmp, env)
        finally:
            stop(agent, timeout=20)
            stop(worker, timeout=20)


@pytest.fixture(scope="module")
def e2e(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e")
    with stack(redis_url, tmp, MAX_JOBS_PER_NODE="2", OUTPUT_LIMIT_BYTES="8192") as s:
        yield s


def test_a_submitted_command_runs_and_its_output_comes_back(e2e: Stack) -> None:
    job = e2e.submit(command="echo hello; echo to-stderr >&2")
    assert job["status"] == "pending" and job["node_id"] == NODE
    done = e2e.final(job["job_id"], timeout=15)
    assert done["status"] == "done"
    assert done["exit_code"] == 0
    assert done["stdout"] == "hello\n" and done["stderr"] == "to-stderr\n"
    assert done["running_at"] <= done["finished_at"]


def test_a_failing_command_is_retried_once_then_fails(e2e: Stack) -> None:
    job = e2e.submit(command="echo attempt >&2; exit 3")
    failed = e2e.final(job["job_id"])
    assert failed["status"] == "failed"
    assert failed["retry_count"] == 1
    assert failed["exit_code"] == 3
    assert failed["stderr"] == "attempt\n"


def test_env_vars_are_injected_and_the_agents_secrets_are_not(e2e: Stack) -> None:
    job = e2e.submit(
        command='echo "$GREETING, $TARGET"; echo "redis=${REDIS_URL:-unset}"',
        env_vars={"GREETING": "hello", "TARGET": "world"},
    )
    done = e2e.final(job["job_id"])
    assert done["stdout"] == "hello, world\nredis=unset\n"


def test_output_is_capped(e2e: Stack) -> None:
    job = e2e.submit(command="head -c 3000000 /dev/zero | tr '\\0' a; echo tail >&2")
    done = e2e.final(job["job_id"])
    assert done["status"] == "done"
    assert len(done["stdout"].encode()) <= 8192
    assert done["stdout"].startswith("a" * 8000)
    assert "bytes dropped" in done["stdout"]
    assert done["stderr"] == "tail\n"


def test_a_job_allocating_1_gib_fails_under_the_512_mib_limit(e2e: Stack) -> None:
    job = e2e.submit(command='python3 -c "b = bytearray(1 << 30); print(len(b))"')
    failed = e2e.final(job["job_id"], timeout=60)
    assert failed["status"] == "failed"
    assert failed["exit_code"] != 0
    assert str(1 << 30) not in failed.get("stdout", "")
    assert "MemoryError" in failed["stderr"] or "memory limit" in failed["stderr"]


def test_a_small_allocation_is_fine(e2e: Stack) -> None:
    job = e2e.submit(command='python3 -c "b = bytearray(64 << 20); print(len(b))"')
    done = e2e.final(job["job_id"])
    assert done["status"] == "done" and done["stdout"] == f"{64 << 20}\n"


def _zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buffer.getvalue()


@contextlib.contextmanager
def file_server(root: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_deploy_archive_is_downloaded_and_its_start_script_run(
    e2e: Stack, tmp_path: Path
) -> None:
    (tmp_path / "app.zip").write_bytes(
        _zip({"start.sh": 'echo "deployed: $(cat data/msg.txt)"\n', "data/msg.txt": "hi there"})
    )
    with file_server(tmp_path) as base:
        job = e2e.submit(deploy_url=f"{base}/app.zip", command="")
        done = e2e.final(job["job_id"])
        missing = e2e.final(e2e.submit(deploy_url=f"{base}/nope.zip")["job_id"])
    assert done["status"] == "done", done
    assert done["stdout"] == "deployed: hi there\n"
    assert missing["status"] == "failed" and missing["exit_code"] == -1
    assert missing["stderr"].startswith("download error: HTTP 404")


def test_a_service_stays_running_and_is_not_timed_out(redis_url: str, tmp_path: Path) -> None:
    timeout, sweep = 2, 0.5
    with stack(
        redis_url,
        tmp_path,
        JOB_TIMEOUT_SECS=str(timeout),
        SWEEP_INTERVAL_SECS=str(sweep),
        MAX_JOBS_PER_NODE="1",
    ) as s:
        service = s.submit(
            command="echo serving on $PORT; exec sleep 300", job_type="service", port=18080
        )
        s.wait(service["job_id"], lambda job: job["status"] == "running")
        # A run job on the same node: the service takes no run slot, and the sweep is working.
        run = s.submit(command="sleep 300")
        timed_out = s.final(run["job_id"], timeout=30)
        assert timed_out["status"] == "failed"
        assert timed_out["exit_code"] == -1 and timed_out["stderr"] == "job timed out"
        assert timed_out["retry_count"] == 0
        # Well past its own timeout and several sweeps, the service is still running.
        time.sleep(timeout + 4 * sweep)
        alive = s.job(service["job_id"])
        assert alive["status"] == "running", alive
        assert "finished_at" not in alive and "exit_code" not in alive


def test_sigterm_lets_running_jobs_finish_and_reports_the_rest(
    redis_url: str, tmp_path: Path
) -> None:
    # The quick job ends once the agent has been told to stop (a `sleep 1` could end before
    # the test saw both jobs running on a loaded machine, or before the signal).
    finish = tmp_path / "finish"
    with stack(redis_url, tmp_path, MAX_JOBS_PER_NODE="2", AGENT_GRACE_SECS="3") as s:
        quick = s.submit(command=f"until [ -e {finish} ]; do sleep 0.05; done; echo finished")
        slow = s.submit(command="echo started; exec sleep 300")
        for job in (quick, slow):
            s.wait(job["job_id"], lambda j: j["status"] == "running")
        s.agent.send_signal(signal.SIGTERM)
        finish.touch()  # within the grace
        assert s.agent.wait(timeout=30) == 0
        done = s.job(quick["job_id"])
        assert done["status"] == "done" and done["stdout"] == "finished\n"
        # Killed after the grace period and reported failed: the one retry puts it back.
        requeued = s.job(slow["job_id"])
        assert requeued["status"] == "pending" and requeued["retry_count"] == 1
        assert "agent stopped before the job finished" in requeued["stderr"]


def test_an_idle_agent_takes_what_a_busy_one_left_waiting(e2e: Stack, tmp_path: Path) -> None:
    """Work stealing with the real agents: four jobs bound to the one node, which runs two at
    a time, each running until the test lets it end; a second agent, idle, takes the two
    waiting; each job runs once."""
    gate = tmp_path / "gate"
    command = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    jobs = [e2e.submit(command=command)["job_id"] for _ in range(4)]
    env = {**e2e.env, "AGENT_WORK_DIR": str(tmp_path / "idle")}
    idle = _spawn(["agent", "--node-id", "e2e-idle"], env, tmp_path / "idle.log")
    try:
        for job in jobs:
            e2e.wait(job, lambda j: j["status"] == "running", timeout=60)
        gate.touch()
        ended = [e2e.final(job, timeout=60) for job in jobs]
    finally:
        gate.touch()
        stop(idle, timeout=20)
    assert {job["status"] for job in ended} == {"done"}, e2e.log_tail()
    assert [job["node_id"] for job in ended] == [NODE, NODE, "e2e-idle", "e2e-idle"]
    assert [job.get("taken_from") for job in ended] == [None, None, NODE, NODE]
    for job in jobs:  # claimed once: one running event each
        query = {"job_id": job, "after": "0", "follow": "0"}
        events = httpx.get(f"{e2e.url}/events", params=query)
        assert events.text.count('"status":"running"') == 1, events.text


def test_a_namespace_at_its_quota_waits_while_another_runs(e2e: Stack) -> None:
    """docs/GUIDE.md, Quotas: team-q may run one job at a time; its second waits for quota
    (pending_reason quota, off the node's queue) while another namespace's job behind it runs
    on the node's second slot, and runs once the first ends (the worker's placement pass)."""
    quota = httpx.put(f"{e2e.url}/namespaces/team-q/quota", json={"running": 1})
    assert quota.status_code == 200, quota.text
    first = e2e.submit(command="sleep 3; echo first", namespace="team-q")
    second = e2e.submit(command="echo second", namespace="team-q")
    other = e2e.submit(command="echo other", namespace="team-r")
    done = {job["job_id"]: e2e.final(job["job_id"]) for job in (first, second, other)}
    first, second, other = (done[job["job_id"]] for job in (first, second, other))
    assert [job["status"] for job in (first, second, other)] == ["done"] * 3
    assert second["stdout"] == "second\n"
    # team-q's two never ran at once; team-r's ran beside the first, not after it.
    assert second["running_at"] >= first["finished_at"]
    assert other["finished_at"] < first["finished_at"]
    listed = {view["name"]: view for view in httpx.get(f"{e2e.url}/namespaces").json()}
    assert listed["team-q"]["use"] == {
        "running": 0,
        "pending": 0,
        "cpus": 0,
        "memory_mb": 0,
        "over_quota": 0,
    }

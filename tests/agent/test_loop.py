"""The agent's protocol with the scheduler and the registry (CONTRACT 3.2-3.3), run in-process
against a real API process; only the retry cases use a scripted transport."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import redis

from scheduler.agent.capacity import Offer
from scheduler.agent.config import AgentConfig
from scheduler.agent.executor import AgentJob, ExecConfig, Executor, Outcome
from scheduler.agent.limits import Limits, RlimitBackend
from scheduler.agent.loop import Agent
from scheduler.agent.remote import AgentError
from scheduler.store.keys import Keys
from tests.processes import api_replicas, scheduler_env, unique_prefix

T = TypeVar("T")
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def api_prefix() -> str:
    """The API's key prefix, new each time the module's API is made: pytest-xdist may run this
    module's tests apart (worksteal), making its module fixtures again on the same Redis."""
    return unique_prefix("agent-proto")


@pytest.fixture(scope="module")
def api(redis_url: str, api_prefix: str) -> Iterator[str]:
    env = scheduler_env(redis_url, api_prefix, MAX_JOBS_PER_NODE="2")
    with api_replicas(1, env) as urls:
        yield urls[0]


def make_agent(
    url: str, tmp: Path, node: str, transport: httpx.AsyncBaseTransport | None = None, **kw: Any
) -> Agent:
    config = AgentConfig(
        node_id=node,
        scheduler_url=url,
        registry_url=url,
        poll_secs=0.1,
        heartbeat_secs=0.2,
        grace_secs=kw.pop("grace_secs", 5),
        max_jobs=kw.pop("max_jobs", 2),
        register_retry_secs=0.01,
        report_backoff_secs=0.01,
        **kw,
    )
    exec_config = ExecConfig(
        work_dir=tmp / "work",
        backend=RlimitBackend(),
        run_limits=Limits(512 * MiB, 1),
        service_limits=Limits(1024 * MiB, 2),
        output_limit=MiB,
        timeout_secs=60,
        deploy_max_bytes=MiB,
    )
    http = httpx.AsyncClient(transport=transport, timeout=5)
    return Agent(config, Executor(exec_config, http), http)


def run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make())


def nodes(url: str) -> dict[str, Any]:
    found: dict[str, Any] = httpx.get(f"{url}/nodes").json()
    return found


def test_register_sends_the_rust_agents_body(api: str, tmp_path: Path) -> None:
    async def go() -> None:
        agent = make_agent(api, tmp_path, "proto-reg")
        assert await agent.remote.register()
        await agent.remote.http.aclose()

    run(go)
    node = nodes(api)["proto-reg"]
    assert node["role"] == "compute" and node["status"] == "healthy" and node["cpu_count"] >= 1


def test_a_404_heartbeat_registers_again(api: str, tmp_path: Path) -> None:
    async def go() -> None:
        agent = make_agent(api, tmp_path, "proto-beat")
        assert await agent.remote.register()
        assert httpx.delete(f"{api}/nodes/proto-beat").status_code == 204
        assert "proto-beat" not in nodes(api)
        await agent.remote.heartbeat()
        await agent.remote.http.aclose()

    run(go)
    assert nodes(api)["proto-beat"]["status"] == "healthy"


def test_a_clean_stop_deregisters_and_the_nodes_queue_moves(api: str, tmp_path: Path) -> None:
    only_node(api, "proto-stay")

    async def go() -> None:
        agent = make_agent(api, tmp_path, "proto-stop", max_jobs=0)  # takes no job
        running = asyncio.create_task(agent.run())
        while nodes(api).get("proto-stop", {}).get("status") != "healthy":
            await asyncio.sleep(0.05)
        submitted = [httpx.post(f"{api}/jobs", json={"command": "x"}).json() for _ in range(2)]
        (job,) = [j for j in submitted if j["node_id"] == "proto-stop"]
        agent.stop()
        await running
        await agent.remote.http.aclose()
        assert "proto-stop" not in nodes(api)
        assert httpx.get(f"{api}/jobs/{job['job_id']}").json()["node_id"] == "proto-stay"

    run(go)


async def until(check: Callable[[], bool], what: str, deadline_secs: float = 30.0) -> None:
    """Wait for a condition, with a generous deadline (never a sleep as synchronisation)."""
    give_up = time.monotonic() + deadline_secs
    while not check():
        assert time.monotonic() < give_up, f"still waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_clean_stop_drains_the_node_while_its_running_job_finishes(
    api: str, tmp_path: Path
) -> None:
    """Issue 24: stopping, the agent first drains its own node ("stopping"): no new job goes
    to it while its running job finishes and reports; then it deregisters (the drain goes
    with the node)."""
    only_node(api, "proto-busy")
    release = tmp_path / "release"
    command = f"while [ ! -e {release} ]; do sleep 0.02; done; echo finished"

    async def go() -> None:
        # A grace past any slowness: the job must still run when the drain is looked at.
        agent = make_agent(api, tmp_path, "proto-drain", max_jobs=1, grace_secs=120)
        running = asyncio.create_task(agent.run())
        await until(lambda: nodes(api).get("proto-drain", {}).get("status") == "healthy", "up")
        placed = [httpx.post(f"{api}/jobs", json={"command": command}).json() for _ in range(2)]
        (job,) = [j for j in placed if j["node_id"] == "proto-drain"]
        url = f"{api}/jobs/{job['job_id']}"
        await until(lambda: httpx.get(url).json()["status"] == "running", "the job to start")
        agent.stop()
        await until(lambda: nodes(api)["proto-drain"].get("drained_by") == "stopping", "drain")
        later = [httpx.post(f"{api}/jobs", json={"command": "x"}).json() for _ in range(4)]
        assert {j["node_id"] for j in later} == {"proto-busy"}
        release.touch()
        await running
        await agent.remote.http.aclose()
        done = httpx.get(url).json()
        assert (done["status"], done["node_id"], done["stdout"]) == (
            "done",
            "proto-drain",
            "finished\n",
        )
        assert "proto-drain" not in nodes(api)

    run(go)


def test_a_stop_during_a_claim_still_runs_and_reports_the_claimed_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The scheduler marks a job running on its claim: a stop that comes while the claim's
    answer is on its way must not cancel the poll loop there (the job was left running with
    no one running it, and the node deregistered: once in CI). The job runs and reports, and
    the stop says it waits for it (it said "no job running", then waited for it in silence:
    test_up's agent stop, once under load)."""
    caplog.set_level(logging.INFO, logger="scheduler.agent")
    seen: list[tuple[str, str, Any]] = []
    claim_answered = asyncio.Event()
    pending = [{"job_id": "job-1", "command": "echo ran"}]

    async def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, request.url.path, body))
        if request.url.path == "/nodes/register":
            return httpx.Response(201, json={"id": "n"})
        if request.url.path == "/jobs":
            jobs = pending[:]
            pending.clear()
            return httpx.Response(200, json=jobs)
        if request.url.path == "/instances":
            return httpx.Response(200, json=[])
        if request.method == "PATCH" and body["status"] == "running":
            await claim_answered.wait()
        return httpx.Response(204 if request.method == "DELETE" else 200, json={})

    def calls() -> list[str]:
        return [f"{method} {path}" for method, path, _ in seen]

    async def go() -> None:
        agent = make_agent("http://sched", tmp_path, "n", httpx.MockTransport(handle))
        running = asyncio.create_task(agent.run())
        await until(lambda: "PATCH /jobs/job-1" in calls(), "the claim")
        agent.stop()
        await until(lambda: "POST /nodes/n/drain" in calls(), "the stop under way")
        claim_answered.set()
        await asyncio.wait_for(running, 30)

    run(go)
    reports = [b for method, _, b in seen if method == "PATCH" and b["status"] != "running"]
    assert [(r["status"], r["stdout"]) for r in reports] == [("done", "ran\n")]
    assert calls()[-1] == "DELETE /nodes/n"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: ")]
    assert said == [
        "stopping: no new jobs; waiting up to 5 s (AGENT_GRACE_SECS) for job-1 to finish, "
        "then killing and reporting what is left"
    ]


@pytest.mark.parametrize("answer", [404, 405, 500, "hang"])
def test_a_drain_the_scheduler_refuses_or_holds_never_stops_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: int | str
) -> None:
    """An older scheduler (no drain route), a failing one or one that never answers: the
    agent stops all the same and deregisters."""
    monkeypatch.setattr("scheduler.agent.remote.DRAIN_SECS", 0.2)
    seen: list[str] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path.endswith("/drain"):
            if answer == "hang":
                await asyncio.Event().wait()
            return httpx.Response(int(answer), text="no")
        if request.url.path == "/nodes/register":
            return httpx.Response(201, json={"id": "n"})
        if request.url.path == "/jobs":
            return httpx.Response(200, json=[])
        return httpx.Response(204 if request.method == "DELETE" else 200, json=[])

    async def go() -> None:
        agent = make_agent("http://sched", tmp_path, "n", httpx.MockTransport(handle))
        running = asyncio.create_task(agent.run())
        await until(lambda: "GET /jobs" in seen, "a poll")
        agent.stop()
        await asyncio.wait_for(running, 30)

    run(go)
    assert "POST /nodes/n/drain" in seen and seen[-1] == "DELETE /nodes/n"


def test_registration_gives_up_after_its_attempts(tmp_path: Path) -> None:
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(500, text="down")

    async def go() -> None:
        agent = make_agent("http://registry", tmp_path, "n", httpx.MockTransport(refuse))
        with pytest.raises(AgentError, match="could not register"):
            await agent.register_with_retries()

    run(go)
    assert calls == ["/nodes/register"] * 11


def only_node(url: str, node: str) -> None:
    """Leave `node` the only live node, so that every new job goes to it."""
    for other in nodes(url):
        assert httpx.delete(f"{url}/nodes/{other}").status_code == 204
    body = {"id": node, "hostname": node, "cpu_count": 1, "role": "compute"}
    assert httpx.post(f"{url}/nodes/register", json=body).status_code == 201


async def _finish(agent: Agent) -> list[str]:
    """The jobs the agent has started, once they are over (a test must not abandon them)."""
    started = sorted(agent.runs, key=lambda job_id: int(job_id.removeprefix("job-")))
    await asyncio.gather(*agent.runs.values())
    return started


def test_poll_claims_up_to_max_jobs_and_reports_results(api: str, tmp_path: Path) -> None:
    node = "proto-poll"
    only_node(api, node)

    async def go() -> None:
        agent = make_agent(api, tmp_path, node, max_jobs=2)
        ids = [
            httpx.post(f"{api}/jobs", json={"command": f"echo {i}"}).json()["job_id"]
            for i in range(3)
        ]
        await agent.poll_once()
        assert await _finish(agent) == ids[:2]  # oldest first, two slots
        await agent.poll_once()
        assert await _finish(agent) == ids[2:]
        await agent.remote.http.aclose()
        for i, job_id in enumerate(ids):
            job = httpx.get(f"{api}/jobs/{job_id}").json()
            assert (job["status"], job["stdout"], job["exit_code"]) == ("done", f"{i}\n", 0)

    run(go)


def test_a_job_claimed_elsewhere_is_skipped(api: str, tmp_path: Path) -> None:
    node = "proto-claim"
    only_node(api, node)

    async def go() -> None:
        agent = make_agent(api, tmp_path, node)
        other = make_agent(api, tmp_path, "proto-other")
        job_id = httpx.post(f"{api}/jobs", json={"command": "echo x"}).json()["job_id"]
        job = AgentJob(job_id=job_id, command="echo x")
        assert not await other.remote.claim(job)  # bound to another node: 409
        assert await agent.remote.claim(job)  # the first claim wins
        assert await agent.remote.claim(job)  # a repeat by the same node answers 200
        rust_claim = {"status": "running"}  # no node id: a second claim is a conflict
        assert httpx.patch(f"{api}/jobs/{job_id}", json=rust_claim).status_code == 409
        await agent.remote.http.aclose()
        await other.remote.http.aclose()

    run(go)


def test_a_report_is_retried_on_server_errors(tmp_path: Path) -> None:
    answers = [503, 502, 200]
    bodies: list[dict[str, Any]] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(answers.pop(0), json={})

    async def go() -> None:
        agent = make_agent("http://sched", tmp_path, "n", httpx.MockTransport(flaky))
        await agent.remote.report("job-1", Outcome(2, "out", "err"))

    run(go)
    body = {"status": "failed", "exit_code": 2, "stdout": "out", "stderr": "err", "node_id": "n"}
    assert bodies == [body] * 3


def test_a_refused_report_is_not_retried(tmp_path: Path) -> None:
    calls = []

    def final(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return httpx.Response(409, text="job already finished")

    async def go() -> None:
        agent = make_agent("http://sched", tmp_path, "n", httpx.MockTransport(final))
        await agent.remote.report("job-1", Outcome(0))

    run(go)
    assert calls == ["PATCH"]


def test_the_claim_body_is_the_rust_agents_plus_the_node_id(tmp_path: Path) -> None:
    seen: list[tuple[str, str, Any]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, json.loads(request.content)))
        return httpx.Response(200, json={})

    async def go() -> None:
        agent = make_agent("http://sched", tmp_path, "n", httpx.MockTransport(record))
        assert await agent.remote.claim(AgentJob(job_id="job-7"))

    run(go)
    assert seen == [
        (
            "PATCH",
            "/jobs/job-7",
            {"status": "running", "exit_code": None, "stdout": "", "stderr": "", "node_id": "n"},
        )
    ]


class LoseAnswers(httpx.AsyncBaseTransport):
    """Sends every request to the API, but loses the answer of the first PATCH of each job
    (the request was applied; the agent sees a broken connection)."""

    def __init__(self) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.lost: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.real.handle_async_request(request)
        if request.method == "PATCH":
            status = json.loads(request.content)["status"]
            if (request.url.path, status) not in self.lost:
                await response.aread()
                self.lost.append((request.url.path, status))
                raise httpx.ReadError("connection lost", request=request)
        return response


def test_lost_answers_to_claim_and_report_are_retried(api: str, tmp_path: Path) -> None:
    node = "proto-lossy"
    only_node(api, node)
    transport = LoseAnswers()

    async def go() -> None:
        agent = make_agent(api, tmp_path, node, transport)
        job_id = httpx.post(f"{api}/jobs", json={"command": "echo once"}).json()["job_id"]
        await agent.poll_once()
        assert await _finish(agent) == [job_id]  # the claim's lost answer did not skip it
        await agent.remote.http.aclose()
        job = httpx.get(f"{api}/jobs/{job_id}").json()
        assert (job["status"], job["stdout"]) == ("done", "once\n")
        assert [status for _, status in transport.lost] == ["running", "done"]

    run(go)


def test_instances_give_workspaces_and_never_stop_polling(tmp_path: Path) -> None:
    paths: list[str] = []

    def registry(request: httpx.Request) -> httpx.Response:
        paths.append(f"{request.url.path}?{request.url.query.decode()}")
        if request.url.path == "/instances":
            return httpx.Response(
                200, json=[{"id": "i-1", "status": "running"}, {"id": "i-2", "status": "failed"}]
            )
        return httpx.Response(200, json=[])

    async def go() -> None:
        agent = make_agent("http://sched", tmp_path, "n 1", httpx.MockTransport(registry))
        spaces = await agent.workspaces()
        assert list(spaces) == ["i-1"] and spaces["i-1"].is_dir()
        await agent.poll_once()

    run(go)
    # Ours says how many it runs at once and that its claims name it (work stealing).
    assert paths[-1] == "/jobs?node_id=n+1&status=pending&claims=named&capacity=2"


def test_a_long_poll_starts_a_job_as_soon_as_it_is_placed(
    api: str, api_prefix: str, tmp_path: Path, redis_url: str
) -> None:
    node = "proto-long"
    only_node(api, node)
    channel = Keys(api_prefix).node_channel(node)
    client = redis.Redis.from_url(redis_url)

    async def go() -> None:
        agent = make_agent(api, tmp_path, node, poll_wait_secs=20)
        polling = asyncio.ensure_future(agent.poll_once())
        while not client.pubsub_numsub(channel)[0][1]:  # type: ignore[index]
            await asyncio.sleep(0.01)
        job_id = httpx.post(f"{api}/jobs", json={"command": "echo now"}).json()["job_id"]
        assert await asyncio.wait_for(polling, 10) is True  # poll again at once
        assert await _finish(agent) == [job_id]
        await agent.remote.http.aclose()

    run(go)
    client.close()


def test_the_wait_is_sent_only_when_set_and_an_instant_answer_means_polling_as_before(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, float | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/jobs":
            timeout = request.extensions["timeout"]["read"]
            seen.append((request.url.params.get("wait", ""), timeout))
        return httpx.Response(200, json=[])

    async def go(wait: float) -> bool:
        transport = httpx.MockTransport(answer)
        agent = make_agent("http://sched", tmp_path, "n", transport, poll_wait_secs=wait)
        return await agent.poll_once()

    # The original scheduler answers at once: no busy loop, the agent sleeps poll_secs.
    assert run(lambda: go(20)) is False
    assert run(lambda: go(0)) is False
    assert seen == [("20", 25.0), ("", 5.0)]


@pytest.mark.parametrize("how", ["poll", "heartbeat"])
def test_a_cancelled_job_is_killed_and_reported_cancelled(
    api: str, tmp_path: Path, how: str
) -> None:
    """The scheduler cancels a running job; the agent hears of it on its next poll (or
    heartbeat), kills the job's process group and reports it cancelled, with its output."""
    node = f"proto-cancel-{how}"
    only_node(api, node)
    marker, started = tmp_path / "survived", tmp_path / "started"

    async def go() -> dict[str, Any]:
        agent = make_agent(api, tmp_path, node, max_jobs=2)
        command = f"echo started; touch {started}; sleep 30; touch {marker}"
        job_id = httpx.post(f"{api}/jobs", json={"command": command}).json()["job_id"]
        await agent.poll_once()
        assert job_id in agent.runs
        # Its output written (a fixed sleep was not always enough on a busy machine).
        await until(started.exists, "the job to start")
        assert httpx.delete(f"{api}/jobs/{job_id}").json()["status"] == "cancelling"
        if how == "poll":
            await agent.poll_once()
        else:
            await agent.remote.heartbeat()
        await asyncio.wait_for(agent.runs[job_id], 10)
        await agent.remote.http.aclose()
        job: dict[str, Any] = httpx.get(f"{api}/jobs/{job_id}").json()
        return job

    job = run(go)
    assert (job["status"], job["failure_reason"]) == ("failed", "cancelled")
    assert job["stdout"] == "started\n"
    time.sleep(0.5)
    assert not marker.exists()  # the whole group was killed, not only the shell
    assert job["stderr"] == "cancelled by operator\n"


def test_a_cancel_reaches_an_agent_at_capacity_through_its_held_poll(
    api: str, api_prefix: str, tmp_path: Path, redis_url: str
) -> None:
    """With every slot taken the agent still long-polls: the scheduler holds the poll and
    answers it as soon as a job of the node is cancelled, so the cancel does not wait for the
    next heartbeat (never sent here). Before, a full agent did not poll at all."""
    node = "proto-cancel-full"
    only_node(api, node)
    channel = Keys(api_prefix).node_channel(node)
    client = redis.Redis.from_url(redis_url)
    marker = tmp_path / "survived"

    async def go() -> dict[str, Any]:
        agent = make_agent(api, tmp_path, node, max_jobs=1, poll_wait_secs=20)
        begun = tmp_path / "begun"
        command = f"echo started; touch {begun}; sleep 30; touch {marker}"
        job_id = httpx.post(f"{api}/jobs", json={"command": command}).json()["job_id"]
        await agent.poll_once()
        assert list(agent.runs) == [job_id]
        running = agent.runs[job_id]
        held = asyncio.ensure_future(agent.poll_once())  # at capacity: held by the scheduler
        deadline = time.monotonic() + 15
        while not client.pubsub_numsub(channel)[0][1] or not begun.exists():  # type: ignore[index]
            assert not held.done() and time.monotonic() < deadline, "the full agent sent no poll"
            await asyncio.sleep(0.01)
        assert httpx.delete(f"{api}/jobs/{job_id}").json()["status"] == "cancelling"
        await asyncio.wait_for(held, 15)
        await asyncio.wait_for(running, 15)
        await agent.remote.http.aclose()
        job: dict[str, Any] = httpx.get(f"{api}/jobs/{job_id}").json()
        return job

    job = run(go)
    client.close()
    assert (job["status"], job["failure_reason"]) == ("failed", "cancelled")
    assert (job["stdout"], job["stderr"]) == ("started\n", "cancelled by operator\n")
    time.sleep(0.5)
    assert not marker.exists()


# What the node offers (issue 24): sent at registration, the last guard on what runs.


def test_the_registration_says_what_the_node_offers(api: str, tmp_path: Path) -> None:
    seen: list[Any] = []

    def registry(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(201, json={})

    offer = Offer(cpus=3, memory_mb=4096, labels={"zone": "eu-1", "gpu": "a100"})

    async def go() -> None:
        mocked = make_agent("http://reg", tmp_path, "n", httpx.MockTransport(registry), offer=offer)
        assert await mocked.remote.register()
        real = make_agent(api, tmp_path, "proto-offer", offer=offer)
        assert await real.remote.register()  # the scheduler takes it
        await real.remote.http.aclose()

    run(go)
    assert seen == [
        {
            "id": "n",
            "hostname": socket.gethostname(),
            "cpu_count": 3,
            "role": "compute",
            "memory_mb": 4096,
            "labels": {"zone": "eu-1", "gpu": "a100"},
        }
    ]
    assert nodes(api)["proto-offer"]["cpu_count"] == 3


def test_a_job_asking_more_than_the_node_offers_is_refused_with_a_report(
    api: str, tmp_path: Path
) -> None:
    """Claimed only to be reported failed, saying why; the scheduler's one retry comes back
    and is refused alike, so the job ends failed instead of waiting for ever."""
    node = "proto-refuse"
    only_node(api, node)

    async def go() -> None:
        agent = make_agent(api, tmp_path, node, offer=Offer(cpus=2, memory_mb=4096))
        body = {"command": "echo never", "memory_mb": 8192}
        job_id = httpx.post(f"{api}/jobs", json=body).json()["job_id"]
        for retry in (0, 1):
            await agent.poll_once()
            assert not agent.runs and not agent.held  # nothing started
            job = httpx.get(f"{api}/jobs/{job_id}").json()
            assert (job["status"], job["retry_count"]) == (("pending", 1), ("failed", 1))[retry]
        await agent.remote.http.aclose()
        assert (job["exit_code"], job.get("stdout"), job["memory_mb"]) == (-1, None, 8192)
        assert job["stderr"] == f"agent: job asks memory_mb=8192, node {node} offers 4096\n"

    run(go)


def test_a_job_that_does_not_fit_beside_the_running_ones_waits_for_them(
    api: str, tmp_path: Path
) -> None:
    node = "proto-room"
    only_node(api, node)
    release = tmp_path / "release"

    async def go() -> None:
        agent = make_agent(api, tmp_path, node, max_jobs=2, offer=Offer(memory_mb=1000))
        holder = {"command": f"until [ -e {release} ]; do sleep 0.02; done", "memory_mb": 800}
        first = httpx.post(f"{api}/jobs", json=holder).json()["job_id"]
        second = httpx.post(f"{api}/jobs", json={"command": "echo later", "memory_mb": 500})
        later = second.json()["job_id"]
        await agent.poll_once()
        assert list(agent.runs) == [first] and agent.waiting == {later}
        await agent.poll_once()  # polled again while the first runs: still waiting
        assert httpx.get(f"{api}/jobs/{later}").json()["status"] == "pending"
        release.touch()
        await asyncio.wait_for(agent.runs[first], 30)
        assert not agent.held  # given back before the report
        await agent.poll_once()
        assert await _finish(agent) == [later] and not agent.waiting
        await agent.remote.http.aclose()
        assert httpx.get(f"{api}/jobs/{later}").json()["stdout"] == "later\n"

    run(go)


def test_an_agent_says_once_when_max_jobs_per_node_caps_its_max_jobs(
    api: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`--max-jobs 4` said "up to 4 jobs" and ran 2: the poll says the API's
    MAX_JOBS_PER_NODE (X-Max-Jobs-Per-Node), and the agent warns once that it caps it."""

    async def go(max_jobs: int) -> None:
        agent = make_agent(api, tmp_path, "capped-1", max_jobs=max_jobs)
        assert await agent.remote.register()
        for _ in range(2):
            await agent.poll_once()
        assert agent.remote.cap == "2"
        await agent.remote.http.aclose()

    with caplog.at_level("WARNING", logger="scheduler.agent"):
        run(lambda: go(4))
        run(lambda: go(2))  # no more than the cap: nothing to say
    said = [r.getMessage() for r in caplog.records if "MAX_JOBS_PER_NODE" in r.getMessage()]
    assert said == [
        "the scheduler runs at most 2 job(s) at once on a node (its MAX_JOBS_PER_NODE): this "
        "agent runs 2, not --max-jobs 4; set MAX_JOBS_PER_NODE=4 where the API runs for more"
    ]

"""The reference agent's node token (AGENT_AUTH=token, docs/SECURITY.md), against a real API
process that requires tokens: it takes the token at registration, sends it on every call,
keeps it across restarts, and gets a new one when its token is revoked."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from scheduler.agent.config import AgentConfig
from scheduler.agent.executor import Outcome
from scheduler.agent.remote import Remote
from scheduler.store.keys import Keys
from tests.agent.test_loop import make_agent, until
from tests.keys import API_KEY as KEY
from tests.keys import JOIN_KEY as JOIN
from tests.processes import api_replicas, scheduler_env, unique_prefix

OPERATOR = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    env = scheduler_env(
        redis_url,
        unique_prefix("agent-token"),
        AGENT_AUTH="token",
        TINYAWS_API_KEY=KEY,
        AGENT_JOIN_KEY=JOIN,
    )
    with api_replicas(1, env) as urls:
        yield urls[0]


class Recorder(httpx.AsyncBaseTransport):
    """Passes every request on, noting the Authorization header each call carried, and each
    answer's status."""

    def __init__(self, local_address: str | None = None) -> None:
        self.inner = httpx.AsyncHTTPTransport(local_address=local_address)
        self.seen: list[tuple[str, str, str]] = []
        self.answers: list[tuple[str, str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization", "")
        self.seen.append((request.method, request.url.path, auth))
        response = await self.inner.handle_async_request(request)
        self.answers.append((request.method, request.url.path, response.status_code))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()  # the client's close reaches it: no socket left open

    def calls(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.answers if (m, p) == (method, path))


def remote(url: str, node: str, token_path: Path, api_key: str = KEY, join_key: str = "") -> Remote:
    config = AgentConfig(
        node_id=node,
        scheduler_url=url,
        registry_url=url,
        api_key=api_key,
        join_key=join_key,
        token_path=str(token_path),
    )
    return Remote(config, httpx.AsyncClient(timeout=5))


def test_the_agent_uses_its_node_token_on_every_call(api: str, tmp_path: Path) -> None:
    recorder = Recorder()
    token_path = tmp_path / "node-token"
    agent = make_agent(api, tmp_path, "tok-1", recorder, api_key=KEY, token_path=str(token_path))

    kept: dict[str, object] = {}

    async def go() -> dict[str, object]:
        runner = asyncio.create_task(agent.run())
        while not agent.remote.token:
            await asyncio.sleep(0.02)
        kept.update(token=token_path.read_text(), mode=stat.S_IMODE(os.stat(token_path).st_mode))
        job = httpx.post(f"{api}/jobs", json={"command": "echo hi"}, headers=OPERATOR).json()
        for _ in range(300):
            done: dict[str, object] = httpx.get(
                f"{api}/jobs/{job['job_id']}", headers=OPERATOR
            ).json()
            if done["status"] == "done":
                break
            await asyncio.sleep(0.05)
        # A heartbeat too (every 0.2 s; the job may be done before the first).
        for _ in range(300):
            if any(path == "/nodes/heartbeat" for _, path, _ in recorder.seen):
                break
            await asyncio.sleep(0.05)
        agent.stop()
        await runner
        return done

    done = asyncio.run(go())
    assert done["status"] == "done" and done["stdout"] == "hi\n"
    token = kept["token"]
    assert kept["mode"] == 0o600
    register, *calls = recorder.seen
    assert register == ("POST", "/nodes/register", f"Bearer {KEY}")  # only the key adds a node
    paths = {path for _, path, _ in calls}
    assert paths >= {"/nodes/heartbeat", "/jobs", "/jobs/job-1", "/nodes/tok-1"}
    assert all(auth == f"Bearer {token}" for _, _, auth in calls)
    # It stopped cleanly: it drained its node, then deregistered it, with its own token,
    # which is now gone.
    assert ("POST", "/nodes/tok-1/drain", f"Bearer {token}") in calls
    assert calls[-1] == ("DELETE", "/nodes/tok-1", f"Bearer {token}")
    assert not token_path.exists()
    assert "tok-1" not in httpx.get(f"{api}/nodes", headers=OPERATOR).json()


def test_a_restarted_agent_takes_its_live_node_back_with_the_saved_token(
    api: str, tmp_path: Path
) -> None:
    token_path = tmp_path / "node-token"

    async def go() -> tuple[bool, bool, bool]:
        first = remote(api, "tok-2", token_path)
        assert await first.register()
        await first.http.aclose()
        # Restarted without the key: the token file alone lets it re-register its live node.
        restarted = remote(api, "tok-2", token_path, api_key="")
        again = await restarted.register()
        await restarted.http.aclose()
        # Without the file, a stranger with the same node id is refused.
        stranger = remote(api, "tok-2", tmp_path / "none", api_key="")
        refused = not await stranger.register()
        await stranger.http.aclose()
        return again, refused, restarted.token == first.token

    assert asyncio.run(go()) == (True, True, True)


def test_a_revoked_token_is_dropped_and_the_node_registered_again(api: str, tmp_path: Path) -> None:
    token_path = tmp_path / "node-token"

    async def go() -> tuple[str, str]:
        agent = remote(api, "tok-3", token_path)
        assert await agent.register()
        old = agent.token
        assert httpx.delete(f"{api}/nodes/tok-3", headers=OPERATOR).status_code == 204
        await agent.heartbeat()  # 401: the token is gone; it registers again with the key
        await agent.http.aclose()
        return old, agent.token

    old, new = asyncio.run(go())
    assert new and new != old and token_path.read_text() == new
    nodes = httpx.get(f"{api}/nodes", headers=OPERATOR).json()
    assert nodes["tok-3"]["status"] == "healthy"


def test_a_report_refused_for_a_revoked_token_is_delivered_after_registering_again(
    redis_url: str, tmp_path: Path
) -> None:
    """The operator deletes the node while its job runs: its token stops working. The agent's
    report is refused (401); rather than drop a result it can still deliver, it registers
    again and reports with its new token (the running job waits for the sweep's node-loss
    rule, still the node's). A token that may not report on the job gets 404: nothing to
    deliver. (A re-register by the operator, by contrast, gives the id to a new holder: the
    old holder's running job is retried at once, and its late report is 409.)"""
    env = scheduler_env(redis_url, "agent-report", AGENT_AUTH="token", TINYAWS_API_KEY=KEY)
    with api_replicas(1, env) as (url,):

        async def go() -> tuple[str, str]:
            agent = remote(url, "tok-5", tmp_path / "node-token")
            assert await agent.register()
            old = agent.token
            job = httpx.post(f"{url}/jobs", json={"command": "x"}, headers=OPERATOR).json()
            claim = {"status": "running", "node_id": "tok-5"}
            running = httpx.patch(f"{url}/jobs/{job['job_id']}", json=claim, headers=agent._auth())
            assert running.status_code == 200
            httpx.delete(f"{url}/nodes/tok-5", headers=OPERATOR).raise_for_status()
            await agent.report(job["job_id"], Outcome(exit_code=0, stdout="hi\n"))
            await agent.http.aclose()
            return old, agent.token

        old, new = asyncio.run(go())
        assert new and new != old
        done = httpx.get(f"{url}/jobs/job-1", headers=OPERATOR).json()
        assert (done["status"], done["stdout"]) == ("done", "hi\n")


def test_an_agent_with_only_the_join_key_registers_and_works(api: str, tmp_path: Path) -> None:
    async def go() -> tuple[bool, int]:
        agent = remote(api, "tok-join", tmp_path / "node-token", api_key="", join_key=JOIN)
        registered = await agent.register()
        jobs = await agent.http.get(
            f"{api}/jobs",
            params={"node_id": "tok-join", "status": "pending"},
            headers=agent._auth(),
        )
        await agent.http.aclose()
        return registered, jobs.status_code

    assert asyncio.run(go()) == (True, 200)


def test_a_polled_job_is_read_for_what_the_agent_uses_only() -> None:
    """The agent reads a polled job's id and what a client submits; the other fields of the
    wire job are not its business, whatever their types (another scheduler may write them
    otherwise), so they never make it drop a poll."""
    from scheduler.agent.remote import _jobs_decoder

    body = (
        b'[{"job_id":"job-1","node_id":7,"command":"echo hi","env_vars":{"A":"1"},'
        b'"status":null,"retry_count":"1","created_at":1700000000,"stdout":null,"extra":[1]}]'
    )
    (job,) = _jobs_decoder.decode(body)
    assert (job.job_id, job.command, job.env_vars) == ("job-1", "echo hi", {"A": "1"})
    assert not hasattr(job, "created_at") and not hasattr(job, "stdout")


def failures(redis_url: str, prefix: str, address: str = "127.0.0.1") -> int:
    """The wrong credentials Redis counts against `address` in its window (api/guesses.py)."""
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.get(Keys(prefix).auth_failures(address)) or 0)
    finally:
        client.close()


AGENT_ADDRESS = "127.0.0.2"  # loopback too (127.0.0.0/8), apart from the other callers

# (AGENT_AUTH, the server's keys, the agent's): every way an agent is set up to call.
SETUPS = {
    "token, the key": ("token", {"TINYAWS_API_KEY": KEY}, {"api_key": KEY}),
    "token, the join key": (
        "token",
        {"TINYAWS_API_KEY": KEY, "AGENT_JOIN_KEY": JOIN},
        {"join_key": JOIN},
    ),
    "token, no key": ("token", {}, {}),
    "open, the key": ("open", {"TINYAWS_API_KEY": KEY}, {"api_key": KEY}),
    "open, a key the agent lacks": ("open", {"TINYAWS_API_KEY": KEY}, {}),
    "open, no key": ("open", {}, {}),
}


@pytest.mark.parametrize("setup", SETUPS)
def test_an_agents_whole_life_is_never_a_wrong_credential(
    redis_url: str, tmp_path: Path, prefix: str, setup: str
) -> None:
    """Issue 36: the agent's GET /instances was a wrong key on every poll in token mode, and
    the count locked its operator out. Every call the reference agent makes, in every mode,
    with and without the keys: register, heartbeats, instances and polls, claims and
    reports, a service it runs and stops, the drain and deregister of a clean stop. None is
    refused (401, 429) and Redis
    counts no wrong credential for its address, with AUTH_FAILURES_MAX=1."""
    mode, server_keys, agent_keys = SETUPS[setup]
    env = scheduler_env(redis_url, prefix, AGENT_AUTH=mode, AUTH_FAILURES_MAX="1", **server_keys)
    operator = {"Authorization": f"Bearer {KEY}"} if server_keys.get("TINYAWS_API_KEY") else {}
    # The agent calls from an address of its own: what Redis counts there is the agent's, not
    # a call of another test's process that found this server on a port it used before.
    recorder = Recorder(local_address=AGENT_ADDRESS)
    with api_replicas(1, env) as (url,):
        token_path = str(tmp_path / "node-token")
        agent = make_agent(url, tmp_path, "life", recorder, token_path=token_path, **agent_keys)

        async def go() -> list[str]:
            running = asyncio.create_task(agent.run())
            await until(lambda: bool(agent.remote.token), "its registration")
            jobs = [
                httpx.post(f"{url}/jobs", json={"command": c}, headers=operator).json()
                for c in ("echo hi", "exit 3")
            ]

            def status(job: dict[str, str]) -> str:
                read = httpx.get(f"{url}/jobs/{job['job_id']}", headers=operator)
                found: str = read.json()["status"]
                return found

            for job in jobs:
                await until(lambda job=job: status(job) in ("done", "failed"), "a job's end")
            service = {"command": "sleep 60", "job_type": "service", "max_retries": 0}
            jobs.append(httpx.post(f"{url}/jobs", json=service, headers=operator).json())
            # Started, not just claimed: a stop between the two leaves it to the node-loss rule.
            await until(lambda: jobs[-1]["job_id"] in agent.services, "the service to start")
            await until(
                lambda: (
                    recorder.calls("POST", "/nodes/heartbeat") >= 3
                    and recorder.calls("GET", "/instances") >= 5
                ),
                "heartbeats and polls",
            )
            agent.stop()
            await running
            await agent.remote.http.aclose()
            return [status(job) for job in jobs]

        assert asyncio.run(go()) == ["done", "failed", "failed"]  # the service stopped
        refused = [a for a in recorder.answers if a[2] in (401, 403, 429)]
        assert not refused
        paths = {(m, p) for m, p, _ in recorder.answers}
        assert {("POST", "/nodes/life/drain"), ("DELETE", "/nodes/life")} <= paths
        assert recorder.answers and failures(redis_url, prefix, AGENT_ADDRESS) == 0


def test_a_stale_token_answered_429_is_replaced_by_registering_again(
    redis_url: str, tmp_path: Path, prefix: str
) -> None:
    """A stale token (its node deleted, or Redis lost it) is a wrong credential, counted like
    any other; past AUTH_FAILURES_MAX from the agent's address it is answered 429, not 401.
    The agent registers again with its key, which is right and always served, and polls on."""
    env = scheduler_env(
        redis_url, prefix, AGENT_AUTH="token", TINYAWS_API_KEY=KEY, AUTH_FAILURES_MAX="1"
    )
    with api_replicas(1, env) as (url,):

        async def go() -> tuple[str, str, int]:
            agent = remote(url, "stale", tmp_path / "node-token")
            assert await agent.register()
            stale = agent.token
            httpx.delete(f"{url}/nodes/stale", headers=OPERATOR).raise_for_status()
            # A stranger beside it guesses twice: the address is past the limit.
            for guess in ("guess-1", "guess-2"):
                httpx.get(f"{url}/jobs", headers={"Authorization": f"Bearer {guess}"})
            refused = await agent.http.get(
                f"{url}/jobs",
                params={"node_id": "stale", "status": "pending"},
                headers=agent._auth(),
            )
            assert refused.status_code == 429, refused.text
            assert await agent.pending() == []  # 429: it registers again
            fresh = agent.token
            polled = await agent.http.get(
                f"{url}/jobs",
                params={"node_id": "stale", "status": "pending"},
                headers=agent._auth(),
            )
            await agent.http.aclose()
            return stale, fresh, polled.status_code

        stale, fresh, polled = asyncio.run(go())
        assert fresh and fresh != stale and polled == 200
        nodes = httpx.get(f"{url}/nodes", headers=OPERATOR).json()
        assert nodes["stale"]["status"] == "healthy"


class HeldPolls(Recorder):
    """A Recorder that holds each poll's answer (GET /jobs) until `release` is set: the
    answer of a call sent with a token that was replaced while it was under way."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.url.path == "/jobs":
            await self.release.wait()
        return response


@pytest.mark.parametrize("keys", ["the join key", "the key"])
def test_a_late_refusal_of_a_replaced_token_keeps_the_new_one(
    api: str, tmp_path: Path, keys: str
) -> None:
    """A stale token refused on two calls under way at once (a poll and a heartbeat, right
    after Redis lost the node): the first refusal registers again and the agent takes a new
    token; the second, answered later, refused the old token, not the new one. It dropped the
    new one and registered again: with the join key that is refused (the id is held now), and
    the agent was left with no token at all, for good; with the key it revoked its own new
    token, failing whatever call was carrying it."""
    node = f"late-{keys.split()[-2]}"
    transport = HeldPolls()
    chosen = {"join_key": JOIN, "api_key": ""} if keys == "the join key" else {"api_key": KEY}
    config = AgentConfig(node_id=node, scheduler_url=api, registry_url=api, **chosen)
    agent = Remote(config, httpx.AsyncClient(timeout=5, transport=transport))

    async def go() -> tuple[str, str, str, int]:
        assert await agent.register()
        stale = agent.token
        httpx.delete(f"{api}/nodes/{node}", headers=OPERATOR).raise_for_status()
        polling = asyncio.create_task(agent.pending())
        await until(lambda: transport.calls("GET", "/jobs") == 1, "the poll's refusal")
        await agent.heartbeat()  # refused too: registers again
        fresh = agent.token
        transport.release.set()
        assert await polling == []
        polled = await agent.http.get(
            f"{api}/jobs", params={"node_id": node, "status": "pending"}, headers=agent._auth()
        )
        await agent.http.aclose()
        return stale, fresh, agent.token, polled.status_code

    stale, fresh, kept, polled = asyncio.run(go())
    assert fresh and fresh != stale
    assert kept == fresh
    assert polled == 200


def test_a_fleet_behind_one_address_gets_back_in_after_its_tokens_went_stale(
    redis_url: str, prefix: str
) -> None:
    """Six agents behind one address (a NAT) whose tokens all went stale at once (their nodes
    deleted, as when Redis lost them): each stale call is a wrong credential, two a tick
    (GET /instances, the poll), so the address passes AUTH_FAILURES_MAX=3 and their stale
    calls get 429. Each registers again with the join key, which is right and served from
    that address all the same: every agent polls with a fresh token."""
    env = scheduler_env(
        redis_url,
        prefix,
        AGENT_AUTH="token",
        TINYAWS_API_KEY=KEY,
        AGENT_JOIN_KEY=JOIN,
        AUTH_FAILURES_MAX="3",
    )
    with api_replicas(1, env) as (url,):

        async def go() -> list[int]:
            fleet = [
                Remote(
                    AgentConfig(f"nat-{n}", url, url, join_key=JOIN),
                    httpx.AsyncClient(timeout=5),
                )
                for n in range(6)
            ]
            for agent in fleet:
                assert await agent.register()
            for agent in fleet:
                httpx.delete(f"{url}/nodes/{agent.config.node_id}", headers=OPERATOR)
            for agent in fleet:
                assert await agent.instances() == []  # refused: not taken for a stale token
                assert await agent.pending() == []  # refused: registers again
            polled = []
            for agent in fleet:
                params = {"node_id": agent.config.node_id, "status": "pending"}
                answer = await agent.http.get(f"{url}/jobs", params=params, headers=agent._auth())
                polled.append(answer.status_code)
                await agent.http.aclose()
            return polled

        assert asyncio.run(go()) == [200] * 6
        assert failures(redis_url, prefix) == 3 + 1  # the rest answered by the bar


def test_a_refused_registration_says_once_which_key_it_needs(
    api: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second agent beside `up` without its key looped `register ... 401` with no hint:
    now the first refusal logs the hint cli/agent.py wrote (which key, where up keeps it)."""
    config = AgentConfig(
        node_id="hint-1", scheduler_url=api, registry_url=api, refused_hint="HINT: the key"
    )

    async def go() -> list[bool]:
        agent = Remote(config, httpx.AsyncClient(timeout=5))
        registered = [await agent.register(), await agent.register()]
        await agent.http.aclose()
        return registered

    with caplog.at_level("INFO", logger="scheduler.agent"):
        assert asyncio.run(go()) == [False, False]
    hints = [r for r in caplog.records if r.getMessage() == "HINT: the key"]
    assert len(hints) == 1 and hints[0].levelname == "ERROR"


def test_a_stopping_drain_says_how_many_jobs_stayed_and_what_becomes_of_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The drain moves at most 1000 jobs a call: the agent's log said only what moved, so
    49 000 delayed jobs left bound to a stopped node went unsaid (a newcomer's finding)."""
    answer = {"node_id": "n", "moved": 3, "unplaced": 1000, "stayed": 49000}

    def scheduler(request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("POST", "/nodes/n/drain")
        return httpx.Response(200, json=answer)

    async def go() -> None:
        config = AgentConfig(node_id="n", scheduler_url="http://s", registry_url="http://s")
        http = httpx.AsyncClient(transport=httpx.MockTransport(scheduler))
        async with http:
            await Remote(config, http).drain_self()

    with caplog.at_level("INFO", logger="scheduler.agent"):
        asyncio.run(go())
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("drained")]
    assert said == [
        "drained node n: 3 queued job(s) moved, 1000 unplaced, 49000 stayed (bound to this"
        " node still: an instance's stay, the others move once it is gone, a delayed one when"
        " due)"
    ]

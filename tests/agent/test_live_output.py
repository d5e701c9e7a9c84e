"""A running job's output reaches the scheduler while the job runs (agent/live_output.py):
`POST /jobs/{id}/output` chunks, in order, with the offsets of the contract, against an
in-process fake scheduler (and once against a real API process). Jobs that must be seen running
wait for a file the test creates, so nothing depends on how fast the machine is."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from scheduler.agent import live_output
from scheduler.agent.config import AgentConfig
from scheduler.agent.live_output import LiveOutput
from scheduler.agent.loop import Agent
from scheduler.agent.remote import Remote
from tests.agent.test_loop import make_agent, only_node, until
from tests.processes import api_replicas, scheduler_env, unique_prefix

Hook = Callable[[httpx.Request, dict[str, Any]], Awaitable[httpx.Response | None]]
JOB = "job-1"


class FakeScheduler:
    """The scheduler's side of the agent's calls: hands out `pending` once, takes claims,
    reports and beats, and holds each stream's live output as the contract says (the offset it
    holds; a chunk it has already answers that offset again; one past it, 409). `hook` may
    answer an output call instead, or hold it; `refuse` says which calls get 401; a
    registration answers the token `issue`."""

    def __init__(self) -> None:
        self.pending: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str, str, Any]] = []  # method, path, bearer, body
        self.held = {"stdout": bytearray(), "stderr": bytearray()}
        self.hook: Hook | None = None
        self.refuse: Callable[[httpx.Request], bool] = lambda request: False
        self.issue = ""

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        self.calls.append((request.method, request.url.path, bearer, body))
        if self.refuse(request):
            return httpx.Response(401, text="unauthorized")
        if request.url.path == "/nodes/register":
            return httpx.Response(201, json={"id": "n", "token": self.issue})
        if request.url.path == "/jobs":
            jobs, self.pending = self.pending, []
            return httpx.Response(200, json=jobs)
        if request.url.path == "/instances":
            return httpx.Response(200, json=[])
        if request.url.path.endswith("/output"):
            if self.hook is not None and (answer := await self.hook(request, body)) is not None:
                return answer
            return self.hold(body)
        return httpx.Response(200, json={})

    def hold(self, body: dict[str, Any]) -> httpx.Response:
        held, data, offset = self.held[body["stream"]], body["data"].encode(), body["offset"]
        if offset > len(held):
            return httpx.Response(409, json={"error": "offset ahead", "offset": len(held)})
        held += data[len(held) - offset :]  # nothing when it holds the chunk already
        return httpx.Response(200, json={"offset": len(held)})

    def outputs(self, stream: str = "stdout") -> list[tuple[int, str]]:
        return [(b["offset"], b["data"]) for _, p, _, b in self.calls if _output(p, b, stream)]

    def text(self, stream: str = "stdout") -> str:
        return self.held[stream].decode()

    def order(self) -> list[str]:
        """The output calls and the report, in the order they arrived."""
        return [
            "output" if path.endswith("/output") else body["status"]
            for method, path, _, body in self.calls
            if path.endswith("/output") or (method == "PATCH" and body["status"] != "running")
        ]

    def report(self) -> dict[str, Any]:
        (body,) = [b for m, _, _, b in self.calls if m == "PATCH" and b["status"] != "running"]
        return dict(body)


def _output(path: str, body: Any, stream: str) -> bool:
    return path.endswith("/output") and body["stream"] == stream


def agent_for(fake: FakeScheduler, tmp_path: Path, **kw: Any) -> Agent:
    kw.setdefault("output_flush_secs", 0.05)
    return make_agent("http://sched", tmp_path, "n", httpx.MockTransport(fake.handle), **kw)


async def start(agent: Agent, fake: FakeScheduler, command: str) -> asyncio.Task[None]:
    fake.pending = [{"job_id": JOB, "command": command}]
    await agent.poll_once()
    return agent.runs[JOB]


def waiting_for(release: Path) -> str:
    return f"until [ -e {release} ]; do sleep 0.02; done"


def test_output_arrives_in_order_while_the_job_runs(tmp_path: Path) -> None:
    fake, release = FakeScheduler(), tmp_path / "release"
    command = f"echo first; echo warn >&2; {waiting_for(release)}; echo second"

    async def go() -> None:
        agent = agent_for(fake, tmp_path)
        running = await start(agent, fake, command)
        await until(lambda: fake.text() == "first\n" and fake.text("stderr") == "warn\n", "1st")
        assert not running.done()  # seen while the job still runs
        release.touch()
        await asyncio.wait_for(running, 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    assert fake.outputs() == [(0, "first\n"), (6, "second\n")]
    assert fake.outputs("stderr") == [(0, "warn\n")]
    report = fake.report()
    assert (report["stdout"], report["stderr"]) == ("first\nsecond\n", "warn\n")
    assert fake.order()[-1] == "done"
    body = next(b for _, p, _, b in fake.calls if p == f"/jobs/{JOB}/output")
    assert body == {"node_id": "n", "stream": "stdout", "offset": 0, "data": "first\n"}


@pytest.mark.parametrize("char", ["x", "€"])  # "€" is 3 bytes: 65536 is no multiple of it
def test_a_big_output_goes_in_chunks_of_at_most_64_kib(tmp_path: Path, char: str) -> None:
    fake = FakeScheduler()
    script = tmp_path / "big.py"
    script.write_text(f"import sys\nsys.stdout.write({char!r} * 100_000)\n", encoding="utf-8")

    async def go() -> None:
        agent = agent_for(fake, tmp_path, output_flush_secs=3600)  # sent as chunks fill
        await asyncio.wait_for(await start(agent, fake, f"{sys.executable} {script}"), 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    sizes = [len(data.encode()) for _, data in fake.outputs()]
    assert max(sizes) <= 65536 and len(sizes) >= len((char * 100_000).encode()) // 65536 + 1
    offsets = [offset for offset, _ in fake.outputs()]
    assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]  # contiguous, in order
    assert fake.text() == char * 100_000 == fake.report()["stdout"]


def test_a_lost_answer_or_a_5xx_is_sent_again_and_nothing_is_doubled(tmp_path: Path) -> None:
    fake, release = FakeScheduler(), tmp_path / "release"
    answers: list[str] = ["lost", "503"]

    async def flaky(request: httpx.Request, body: dict[str, Any]) -> httpx.Response | None:
        if not answers:
            return None
        what = answers.pop(0)
        if what == "503":
            return httpx.Response(503, text="busy")
        fake.hold(body)  # applied, but the answer never reaches the agent
        raise httpx.ReadError("connection lost", request=request)

    fake.hook = flaky

    async def go() -> None:
        agent = agent_for(fake, tmp_path)
        running = await start(agent, fake, f"echo first; {waiting_for(release)}; echo second")
        await until(lambda: not answers and fake.text() == "first\n", "the retries")
        release.touch()
        await asyncio.wait_for(running, 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    assert fake.outputs() == [(0, "first\n")] * 3 + [(6, "second\n")]
    assert fake.text() == "first\nsecond\n" == fake.report()["stdout"]


def test_a_409_rebases_on_the_offset_the_scheduler_holds(tmp_path: Path) -> None:
    """The scheduler lost what it held: the agent sends what is unsent at the offset it names,
    not again what it acknowledged."""
    fake, release = FakeScheduler(), tmp_path / "release"

    async def go() -> None:
        agent = agent_for(fake, tmp_path)
        running = await start(agent, fake, f"echo first; {waiting_for(release)}; echo second")
        await until(lambda: fake.text() == "first\n", "the first line")
        fake.held["stdout"].clear()
        release.touch()
        await asyncio.wait_for(running, 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    assert fake.outputs() == [(0, "first\n"), (6, "second\n"), (0, "second\n")]
    assert fake.text() == "second\n"
    assert fake.report()["stdout"] == "first\nsecond\n"  # the report is whole, as before


@pytest.mark.parametrize("status", [404, 405, 413])
def test_a_refusal_stops_the_jobs_live_output_and_the_report_still_goes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    fake, release = FakeScheduler(), tmp_path / "release"

    async def gone(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(status, json={"error": "job is not running"})

    fake.hook = gone

    async def go() -> None:
        agent = agent_for(fake, tmp_path)
        running = await start(agent, fake, f"echo first; {waiting_for(release)}; echo second")
        await until(lambda: len(fake.outputs()) == 1, "the first chunk")
        release.touch()
        await asyncio.wait_for(running, 60)
        await agent.remote.http.aclose()

    with caplog.at_level(logging.INFO, logger="scheduler.agent"):
        asyncio.run(go())
    assert fake.outputs() == [(0, "first\n")]
    assert fake.order() == ["output", "done"]
    assert fake.report()["stdout"] == "first\nsecond\n"
    said = [r for r in caplog.records if "takes no more of its output live" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO if status != 413 else logging.WARNING]


def test_a_character_split_across_reads_is_sent_whole(tmp_path: Path) -> None:
    """ "é" written in two parts (the job waits in between) is sent whole in the second chunk;
    a character cut short at the end is U+FFFD, as in the report."""
    fake, release = FakeScheduler(), tmp_path / "release"
    command = f"printf 'a\\303'; {waiting_for(release)}; printf '\\251\\n\\342\\202'"

    async def go() -> None:
        agent = agent_for(fake, tmp_path)
        running = await start(agent, fake, command)
        await until(lambda: fake.text() == "a", "the first character")
        release.touch()
        await asyncio.wait_for(running, 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    outputs = fake.outputs()
    assert outputs[:2] in ([(0, "a"), (1, "é\n\ufffd")], [(0, "a"), (1, "é\n")])  # é whole
    assert fake.text() == "aé\n\ufffd" == fake.report()["stdout"]


def test_output_the_scheduler_does_not_take_in_time_is_dropped_for_a_marker(
    tmp_path: Path,
) -> None:
    """While a chunk is under way, at most output_buffer_bytes wait: the oldest go, a marker
    says how many, and the offsets count what was sent (no gap)."""
    fake = FakeScheduler()
    first_seen, answer = asyncio.Event(), asyncio.Event()

    async def slow(request: httpx.Request, body: dict[str, Any]) -> httpx.Response | None:
        if body["offset"] == 0:
            first_seen.set()
            await answer.wait()
        return None

    fake.hook = slow
    config = AgentConfig(
        node_id="n",
        scheduler_url="http://sched",
        registry_url="http://sched",
        output_flush_secs=0,
        output_buffer_bytes=1000,
    )

    async def go() -> None:
        remote = Remote(config, httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)))
        live = LiveOutput(remote, JOB)
        live.feed("stdout", b"first\n")
        await asyncio.wait_for(first_seen.wait(), 30)
        for _ in range(5):
            live.feed("stdout", b"y" * 1000)
        answer.set()
        await live.finish()
        await remote.http.aclose()

    asyncio.run(go())
    marker = "\n[agent: 4000 bytes of output not sent]\n"
    assert fake.outputs() == [(0, "first\n"), (6, marker + "y" * 1000)]
    assert fake.text() == "first\n" + marker + "y" * 1000


def test_switched_off_the_agent_sends_no_live_output(tmp_path: Path) -> None:
    fake = FakeScheduler()

    async def go() -> None:
        agent = agent_for(fake, tmp_path, live_output=False)
        await asyncio.wait_for(await start(agent, fake, "echo hi; echo there >&2"), 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    assert [p for _, p, _, _ in fake.calls if p.endswith("/output")] == []
    assert (fake.report()["stdout"], fake.report()["stderr"]) == ("hi\n", "there\n")


def test_the_last_chunk_is_sent_before_the_report(tmp_path: Path) -> None:
    """With a flush period no job outlives, only the end of the job sends its output: the
    chunk's call comes before the report's."""
    fake = FakeScheduler()

    async def go() -> None:
        agent = agent_for(fake, tmp_path, output_flush_secs=3600)
        await asyncio.wait_for(await start(agent, fake, "echo hello; echo oops >&2"), 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    assert fake.order() == ["output", "output", "done"]
    assert (fake.text(), fake.text("stderr")) == ("hello\n", "oops\n")


def test_a_final_flush_with_no_answer_does_not_hold_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scheduler.agent.live_output.FINAL_FLUSH_SECS", 0.2)
    fake = FakeScheduler()

    async def hang(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    fake.hook = hang

    async def go() -> None:
        agent = agent_for(fake, tmp_path, output_flush_secs=3600)
        await asyncio.wait_for(await start(agent, fake, "echo hello"), 60)
        await agent.remote.http.aclose()

    asyncio.run(go())
    assert fake.order() == ["output", "done"]
    assert fake.report()["stdout"] == "hello\n"


def _live_remote(fake: FakeScheduler, token: str) -> Remote:
    config = AgentConfig(node_id="n", scheduler_url="http://sched", registry_url="http://sched")
    remote = Remote(config, httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)))
    remote.token = token
    return remote


def test_a_stale_token_is_renewed_and_the_chunk_sent_with_the_new_one() -> None:
    fake = FakeScheduler()
    fake.refuse = lambda request: request.headers.get("authorization") == "Bearer old"
    fake.issue = "new"

    async def go() -> Remote:
        remote = _live_remote(fake, "old")
        live = LiveOutput(remote, JOB)
        live.feed("stdout", b"hello\n")
        await live.finish()
        await remote.http.aclose()
        return remote

    remote = asyncio.run(go())
    assert [(m, p, bearer) for m, p, bearer, _ in fake.calls] == [
        ("POST", f"/jobs/{JOB}/output", "old"),
        ("POST", "/nodes/heartbeat", "old"),  # the token is stale: the beat says so too
        ("POST", "/nodes/register", ""),
        ("POST", f"/jobs/{JOB}/output", "new"),
    ]
    assert remote.token == "new" and fake.text() == "hello\n" and not remote.live_refused


def test_a_scheduler_refusing_live_output_with_a_good_token_keeps_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A scheduler from before live output, with a key, answers 401 to the route it does not
    know: the heartbeat takes the token, so the token is kept (no registration) and the agent
    stops sending live output, saying so once."""
    fake = FakeScheduler()
    fake.refuse = lambda request: request.url.path.endswith("/output")

    async def go() -> Agent:
        agent = agent_for(fake, tmp_path)
        agent.remote.token = "good"
        await asyncio.wait_for(await start(agent, fake, "echo one"), 60)
        await asyncio.wait_for(await start(agent, fake, "echo two"), 60)
        await agent.remote.http.aclose()
        return agent

    with caplog.at_level(logging.INFO, logger="scheduler.agent"):
        agent = asyncio.run(go())
    paths = [p for m, p, _, _ in fake.calls if m == "POST"]
    assert paths == [f"/jobs/{JOB}/output", "/nodes/heartbeat"]  # the second job sent none
    assert agent.remote.token == "good" and agent.remote.live_refused
    assert [b["stdout"] for m, _, _, b in fake.calls if m == "PATCH" and b["status"] == "done"] == [
        "one\n",
        "two\n",
    ]
    said = [r for r in caplog.records if "refuses live output" in r.getMessage()]
    assert len(said) == 1


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    with api_replicas(1, scheduler_env(redis_url, unique_prefix("agent-live"))) as urls:
        yield urls[0]


def test_a_real_scheduler_holds_the_output_while_the_job_runs(api: str, tmp_path: Path) -> None:
    """The agent against the API's own route: the first line is in GET /jobs/{id}/logs while
    the job waits; at the end the live output is the report's, chunked past 64 KiB."""
    only_node(api, "live-real")
    release = tmp_path / "release"
    command = f"echo first; echo warn >&2; {waiting_for(release)}; "
    command += "head -c 200000 /dev/zero | tr '\\0' x; echo"

    async def go() -> str:
        agent = make_agent(api, tmp_path, "live-real", output_flush_secs=0.05)
        job_id: str = httpx.post(f"{api}/jobs", json={"command": command}).json()["job_id"]
        await agent.poll_once()
        running = agent.runs[job_id]
        logs = f"{api}/jobs/{job_id}/logs"
        await until(lambda: httpx.get(logs, params={"stream": "stdout"}).text == "first\n", "1st")
        assert not running.done()
        release.touch()
        await asyncio.wait_for(running, 60)
        await agent.remote.http.aclose()
        return job_id

    job_id = asyncio.run(go())
    job = httpx.get(f"{api}/jobs/{job_id}").json()
    assert (job["status"], job["stdout"]) == ("done", "first\n" + "x" * 200_000 + "\n")
    logs = f"{api}/jobs/{job_id}/logs"
    assert httpx.get(logs, params={"stream": "stdout"}).text == job["stdout"]
    assert httpx.get(logs, params={"stream": "stderr"}).text == job["stderr"] == "warn\n"


@pytest.mark.parametrize(
    ("last_taken", "came", "due"),
    [
        (None, 10.0, 10.0),  # never sent: at once
        (5.0, 10.0, 10.0),  # quiet for longer than the interval: at once
        (9.5, 10.0, 10.5),  # a chunk 0.5 s ago: one interval after it
        (9.5, 10.2, 10.5),
    ],
)
def test_a_stream_is_due_at_once_after_a_quiet_spell_else_an_interval_after_its_last_chunk(
    last_taken: float | None, came: float, due: float
) -> None:
    stream = live_output._Stream("stdout", 1 << 20)
    if last_taken is not None:
        stream.feed(b"before\n", last_taken)
        stream.take(65536, last_taken)
    stream.feed(b"line\n", came)
    assert stream.due(1.0, 65536, ended=False) == due

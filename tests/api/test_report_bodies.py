"""What a report body may cost, in every AGENT_AUTH mode, on the ASGI path: bodies too large
for the hot lane (over lane.MAX_BODY), trickled or never finished, and a stranger's, whose
body is never asked for. The app is called as the server would call it, to see whether it
asked for the body. The hot lane's own answers to the same: tests/api/test_lane.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.test_agent_security import (
    KEY,
    OPERATOR,
    STRANGER,
    Cluster,
    bearer,
    cluster,
    other_node,
    register_node,
)
from tests.conftest import ClientFactory, assert_json

__all__ = ["cluster"]  # the fixture, shared with test_agent_security


async def call_app(
    api: TestClient,
    path: str,
    headers: dict[str, str],
    body: bytes,
    gate: asyncio.Event | None = None,
    sized: bool = True,
) -> tuple[int, dict[str, str], bool]:
    """PATCH `path` as the server would hand it to the app (declaring len(body) bytes, unless
    not `sized`: then chunked); returns the status, the headers and whether the app asked for
    the body. With a `gate`, the last byte waits for it (a client that trickles its body)."""
    asked: list[bool] = []
    answer: dict[str, Any] = {}
    chunks = [body[:-1], body[-1:]] if gate is not None else [body]

    async def receive() -> dict[str, Any]:
        asked.append(True)
        if len(asked) == len(chunks) and gate is not None:
            await gate.wait()
        chunk = chunks[min(len(asked), len(chunks)) - 1]
        return {"type": "http.request", "body": chunk, "more_body": len(asked) < len(chunks)}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}

    raw = {"content-type": "application/json", **headers}
    if sized:
        raw["content-length"] = str(len(body))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "PATCH",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in raw.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    await api.app(scope, receive, send)  # type: ignore[arg-type]
    return answer["status"], answer["headers"], bool(asked)


def report_body(size: int, status: str = "running") -> bytes:
    """A valid report of exactly `size` bytes."""
    head = json.dumps({"status": status, "stdout": ""}).encode()
    return head[:-2] + b"x" * (size - len(head)) + head[-2:]


BIG = 70 * 1024  # over the size read before any check (api/agents.PRECHECK_OVER_BYTES)


def test_a_big_report_for_an_unknown_job_is_404_unread(cluster: Cluster) -> None:
    portal = cluster.api.portal
    assert portal is not None
    # In token mode a caller without a token learns nothing, not even that the job is unknown.
    who = {} if cluster.mode == "open" else bearer(cluster.tokens["n1"])
    status, _, asked = portal.call(call_app, cluster.api, "/jobs/job-404", who, report_body(BIG))
    assert (status, asked) == (404, False)
    if cluster.mode == "token":
        status, _, asked = portal.call(call_app, cluster.api, "/jobs/job-404", {}, report_body(BIG))
        assert (status, asked) == (401, False)


def test_a_strangers_big_report_is_refused_unread(cluster: Cluster) -> None:
    portal = cluster.api.portal
    assert portal is not None
    before = cluster.state()
    for headers, refused in ((STRANGER, 401), (other_node(cluster), 404)):
        status, _, asked = portal.call(
            call_app, cluster.api, "/jobs/job-1", headers, report_body(BIG)
        )
        if cluster.mode == "open":
            assert (status, asked) == (200, True)  # the open mode's documented risk
            return
        assert (status, asked) == (refused, False)
        assert cluster.state() == before
    own = bearer(cluster.tokens["n1"])
    status, _, asked = portal.call(call_app, cluster.api, "/jobs/job-1", own, report_body(BIG))
    assert (status, asked) == (200, True)


@pytest.mark.parametrize("mode", ["open", "token"])
def test_report_bytes_read_at_once_are_bounded(make_client: ClientFactory, mode: str) -> None:
    """Two reports of 100 kB at once against a budget of 150 kB: the first has sent all but
    its last byte; the second is told to come back (503, Retry-After) as soon as its bytes
    would pass the budget, and nothing changes."""
    api = make_client(
        agent_auth=mode,
        api_key=KEY,
        max_body_bytes=100_000,
        max_report_bytes=100_000,
        report_bytes_in_flight=150_000,
    )
    join = OPERATOR if mode == "token" else {}
    token = register_node(api, "n1", join)
    for _ in range(2):
        api.post("/jobs", json={"command": "x"}, headers=OPERATOR)
    own = bearer(token)

    async def two_at_once() -> tuple[Any, Any]:
        gate = asyncio.Event()
        slow = asyncio.create_task(call_app(api, "/jobs/job-1", own, report_body(100_000), gate))
        while api.app.state.report_budget.used == 0:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        second = await call_app(api, "/jobs/job-2", own, report_body(100_000))
        gate.set()
        return await slow, second

    assert api.portal is not None
    first, second = api.portal.call(two_at_once)
    assert first[0] == 200
    assert (second[0], second[1].get("retry-after")) == (503, "1")
    statuses = [j["status"] for j in assert_json(api.get("/jobs", headers=OPERATOR))]
    assert statuses == ["running", "pending"]
    assert api.app.state.report_budget.used == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("sized", [True, False], ids=["declared", "chunked"])
def test_a_trickled_body_holds_only_what_it_sent(make_client: ClientFactory, sized: bool) -> None:
    """A stranger's report that declares 100 kB (or none) and never finishes holds the bytes
    it sent, not what it declared: the node's own reports still go through meanwhile."""
    api = make_client(
        max_body_bytes=100_000, max_report_bytes=100_000, report_bytes_in_flight=100_000
    )
    register_node(api, "n1", {})
    for _ in range(2):
        api.post("/jobs", json={"command": "x"})
    hanging = report_body(100_000)[:20] + b"x"  # 20 bytes now, the last one never

    async def while_one_hangs() -> tuple[int, int]:
        gate = asyncio.Event()
        stuck = asyncio.create_task(call_app(api, "/jobs/job-1", {}, hanging, gate, sized))
        while api.app.state.report_budget.used == 0:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        held = api.app.state.report_budget.used  # type: ignore[attr-defined]
        status, _, _ = await call_app(api, "/jobs/job-2", {}, report_body(50_000))
        stuck.cancel()  # the client goes away: what it held comes back
        with contextlib.suppress(asyncio.CancelledError):
            await stuck
        return held, status

    assert api.portal is not None
    held, status = api.portal.call(while_one_hangs)
    assert (held, status) == (20, 200)
    assert api.app.state.report_budget.used == 0  # type: ignore[attr-defined]


def test_a_body_that_never_arrives_is_408(make_client: ClientFactory, monkeypatch: Any) -> None:
    monkeypatch.setattr("scheduler.api.http.BODY_READ_SECS", 0.2)
    api = make_client()
    register_node(api, "n1", {})
    api.post("/jobs", json={"command": "x"})

    async def stalled() -> tuple[int, int]:
        gate = asyncio.Event()  # never set
        status, _, _ = await call_app(api, "/jobs/job-1", {}, report_body(100), gate)
        return status, api.app.state.report_budget.used  # type: ignore[attr-defined]

    assert api.portal is not None
    assert api.portal.call(stalled) == (408, 0)
    assert api.get("/jobs/job-1").json()["status"] == "pending"


def test_token_mode_refuses_a_stranger_before_redis_and_body(
    make_client: ClientFactory,
) -> None:
    api = make_client(agent_auth="token")
    register_node(api, "n1", {})
    api.post("/jobs", json={"command": "x"})
    assert api.portal is not None
    for body in (report_body(100), b"garbage"):
        status, _, asked = api.portal.call(call_app, api, "/jobs/job-1", {}, body)
        assert (status, asked) == (401, False)
    # A bearer that is no node's token: checked in Redis, still before the body.
    status, _, asked = api.portal.call(call_app, api, "/jobs/job-1", bearer("x"), b"garbage")
    assert (status, asked) == (401, False)

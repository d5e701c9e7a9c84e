"""Operations built on another plan (`wait` on `watch`, `follow_logs` and `events` on sse.py's
`follow`): a failure the driver throws in (NotSent, Lost) reaches the inner plan, which
decides whether to try again, as it does when it is called alone. Raised in the outer one
instead, a wait on a flaky network raised NotSent, and a follow never resumed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx

from scheduler.client import AsyncClient, Client, Ended, Output, ops
from scheduler.client.retrying import Policy
from scheduler.client.steps import Exchange, NotSent, Now, PolicyAsk, Reply, Sleep

URL = "http://scheduler.test"
JOB = {
    "job_id": "job-1",
    "node_id": "n1",
    "command": "true",
    "status": "done",
    "retry_count": 0,
    "created_at": "2026-12-06T00:00:00Z",
}


def test_a_wait_whose_read_never_left_reads_again() -> None:
    plan = ops.wait("job-1")
    steps = []
    refusals = [NotSent(f"at {URL}: connection refused")]  # the first read's
    step = next(plan)
    try:
        while True:
            steps.append(step)
            if isinstance(step, Now):
                step = plan.send(0.0)
            elif isinstance(step, PolicyAsk):
                step = plan.send(Policy(tries=2, first_pause=0.5))
            elif isinstance(step, Exchange) and refusals:
                step = plan.throw(refusals.pop())
            elif isinstance(step, Exchange):
                step = plan.send(Reply(200, {}, json.dumps(JOB).encode()))
            else:
                step = plan.send(None)
    except StopIteration as stop:
        assert stop.value.status == "done"
    assert [type(s) for s in steps] == [Now, Now, PolicyAsk, Exchange, Sleep, Exchange]


def connect_refused_once() -> httpx.MockTransport:
    tries: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        tries.append(request)
        if len(tries) == 1:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json=JOB)

    return httpx.MockTransport(handle)


def test_a_wait_rides_out_a_refused_connection() -> None:
    with Client(URL, retry_pause=0.0, transport=connect_refused_once()) as client:
        assert client.wait("job-1").status == "done"


def test_an_async_wait_rides_out_a_refused_connection() -> None:
    async def waited() -> str:
        async with AsyncClient(URL, retry_pause=0.0, transport=connect_refused_once()) as client:
            return (await client.wait("job-1")).status

    assert asyncio.run(waited()) == "done"


class Cut(httpx.SyncByteStream):
    """A body sent in these chunks, then the connection lost (or, `whole`, ended)."""

    def __init__(self, *chunks: str, whole: bool) -> None:
        self.chunks, self.whole = [c.encode() for c in chunks], whole

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if not self.whole:
            raise httpx.ReadError("connection reset by peer")


def test_following_logs_resumes_after_a_lost_connection() -> None:
    first = 'retry: 0\n\nid: 1-0\nevent: output\ndata: {"stream": "stdout", "attempt": 1, '
    answers = [
        Cut(first + '"text": "one\\n"}\n\n', whole=False),
        Cut('event: end\ndata: {"status": "done", "exit_code": 0}\n\n', whole=True),
    ]
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=answers[len(sent) - 1])

    with Client(URL, transport=httpx.MockTransport(handle)) as client:
        items = list(client.follow_logs("job-1"))
    assert items == [Output("stdout", 1, "one\n"), Ended("done", 0)]
    assert [r.headers.get("last-event-id") for r in sent] == [None, "1-0"]

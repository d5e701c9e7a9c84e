"""The asyncio client (scheduler.client.AsyncClient) against the real API over a socket: the
same operations as Client's (each written once, ops.py), awaited or iterated with `async for`,
several at once on one client."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from scheduler.client import AsyncClient, BadRequest, Ended, Made, NotFound, Output, WaitTimeout
from tests.client.test_client import register, report
from tests.conftest import Serve


@pytest.fixture
def url(serve: Serve) -> str:
    url = serve(node_ttl_secs=600)
    register(url, "n1")
    return url


def test_submit_wait_list_and_errors(url: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(url, retry_pause=0.01) as scheduler:
            job = await scheduler.submit("echo hi", priority=2)
            assert job.priority == 2
            waiting = asyncio.create_task(scheduler.wait(job.job_id, timeout=60))
            await asyncio.to_thread(report, url, job.job_id, "running")
            await asyncio.to_thread(report, url, job.job_id, "done", exit_code=0, stdout="hi\n")
            assert (await waiting).stdout == "hi\n"
            with pytest.raises(WaitTimeout):
                await scheduler.wait((await scheduler.submit("sleep")).job_id, timeout=0.2)
            with pytest.raises(BadRequest) as raised:
                await scheduler.submit("echo", max_retries=1000)
            assert raised.value.field == "max_retries"
            with pytest.raises(NotFound):
                await scheduler.job("job-404")
            assert [j.job_id async for j in scheduler.jobs(page_size=1)] == ["job-1", "job-2"]
            [made] = await scheduler.submit_many([{"command": "c"}])
            assert isinstance(made, Made)

    asyncio.run(scenario())


def test_many_calls_at_once_each_with_its_own_stream(url: str) -> None:
    async def follow(scheduler: AsyncClient, job_id: str) -> list[Any]:
        return [item async for item in scheduler.follow_logs(job_id)]

    async def scenario() -> None:
        async with AsyncClient(url) as scheduler:
            jobs = await asyncio.gather(*(scheduler.submit(f"echo {n}") for n in range(5)))
            followers = [asyncio.create_task(follow(scheduler, j.job_id)) for j in jobs]
            for n, job in enumerate(jobs):
                await asyncio.to_thread(report, url, job.job_id, "running")
                chunk = {"node_id": "n1", "stream": "stdout", "offset": 0, "data": f"{n}\n"}
                async with httpx.AsyncClient() as agent:
                    await agent.post(f"{url}/jobs/{job.job_id}/output", json=chunk)
                await asyncio.to_thread(report, url, job.job_id, "done", exit_code=0)
            seen = await asyncio.wait_for(asyncio.gather(*followers), 60)
            for n, items in enumerate(seen):
                assert Output("stdout", 1, f"{n}\n") in items
                assert items[-1] == Ended("done", 0)

    asyncio.run(scenario())


class LosingAnswers(httpx.AsyncBaseTransport):
    """The real server's transport, losing the first answer after the server made it."""

    def __init__(self) -> None:
        self.inner, self.lost, self.sent = httpx.AsyncHTTPTransport(), False, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        self.sent += 1
        if not self.lost:
            self.lost = True
            await response.aclose()
            raise httpx.ReadError("connection reset by peer", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_lost_answer_of_a_submit_makes_one_job(url: str) -> None:
    async def scenario() -> None:
        transport = LosingAnswers()
        async with AsyncClient(url, transport=transport, retry_pause=0.01) as scheduler:
            job = await scheduler.submit("echo once")
            assert transport.sent == 2
            assert [j.job_id async for j in scheduler.jobs()] == [job.job_id]

    asyncio.run(scenario())

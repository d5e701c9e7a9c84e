"""The request metrics are the deployment's (api/metrics.py): every API process adds its
counts to Redis, and a scrape of any of them reads the sums (issue 25, item 2)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from scheduler.api.metrics import COLUMNS, RequestStats, deltas, flush
from scheduler.store.keys import Keys
from tests.api.test_metrics import scrape
from tests.conftest import BOTH_FRONTS, ClientFactory, register, submit
from tests.processes import scheduler_env, stop, wait_http
from tests.redis_server import free_port

POSTS = ("scheduler_http_requests_total", (("code", "201"), ("method", "POST"), ("route", "/jobs")))
LATENCY = "scheduler_http_request_duration_seconds"
POST_SERIES = (("method", "POST"), ("route", "/jobs"))


@BOTH_FRONTS
def test_a_scrape_of_either_process_reads_both_processes_requests(
    make_client: ClientFactory,
) -> None:
    first, second = make_client(), make_client()
    register(first, "n1")
    for _ in range(3):
        submit(first, command="x")
    for _ in range(2):
        submit(second, command="y")
    scrape(second)  # adds the second's counts; the first's are added by its own scrape
    for api in (first, second, first):
        m = scrape(api)
        assert m[POSTS] == 5
        assert m[(f"{LATENCY}_count", POST_SERIES)] == 5
        assert m[(f"{LATENCY}_bucket", (("le", "+Inf"), *POST_SERIES))] == 5
        assert 0 < m[(f"{LATENCY}_sum", POST_SERIES)] < 5


def test_each_process_adds_its_counts_by_itself(
    make_client: ClientFactory, rclient: redis.Redis, prefix: str
) -> None:
    api = make_client(metrics_flush_secs=0.1)
    assert api.get("/health").status_code == 200
    field = "GET /health 200 count"
    deadline = time.monotonic() + 30
    while rclient.hget(Keys(prefix).request_stats, field) is None:
        assert time.monotonic() < deadline, "the process never added its counts"
        time.sleep(0.05)
    assert float(rclient.hget(Keys(prefix).request_stats, field) or 0) == 1


def test_rows_go_to_the_hash_and_come_back() -> None:
    stats = RequestStats()
    stats.observe("GET", "/jobs/{id}", 200, 0.003)
    stats.observe("GET", "/jobs/{id}", 200, 20.0)
    stats.observe("POST", "/jobs", 503, 0.0001)
    fields = deltas(stats.rows)
    assert fields["GET /jobs/{id} 200 count"] == 2
    assert fields["GET /jobs/{id} 200 0.005"] == 1
    assert fields["GET /jobs/{id} 200 +Inf"] == 1
    assert "GET /jobs/{id} 200 0.001" not in fields  # zeros are not sent
    back = RequestStats.from_sums({**fields, "GET /jobs/{id} 200 0.0002": 7.0})
    assert back.codes == stats.codes
    assert (
        back.latency[("GET", "/jobs/{id}")].buckets == stats.latency[("GET", "/jobs/{id}")].buckets
    )
    assert len(COLUMNS) == len(stats.rows[("POST", "/jobs", 503)])


class _RedisAway:
    async def run(self, op: object) -> dict[str, float]:
        raise ConnectionError("redis away")


def test_counts_redis_did_not_take_are_kept_for_the_next_flush() -> None:
    stats = RequestStats()
    stats.observe("GET", "/health", 200, 0.001)
    with pytest.raises(ConnectionError):
        asyncio.run(flush(_RedisAway(), stats))  # type: ignore[arg-type]
    stats.observe("GET", "/health", 200, 0.001)
    assert stats.codes == {("GET", "/health", 200): 2}


@pytest.fixture
def serve_two(redis_url: str, prefix: str) -> Iterator[str]:
    port = free_port()
    env = scheduler_env(redis_url, prefix, METRICS_FLUSH_SECS="0.1")
    cmd = [sys.executable, "-m", "scheduler", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--workers", "2", "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", timeout=60)
        yield url
    finally:
        stop(proc)


def health_count(text: str) -> float:
    for line in text.splitlines():
        wanted = ('route="/health"', 'code="200"', 'method="GET"')
        if line.startswith("scheduler_http_requests_total{") and all(w in line for w in wanted):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_scrapes_of_serve_with_two_processes_never_go_back(serve_two: str) -> None:
    """Before, each scrape answered from whichever process took the connection: 25, 8, 25."""
    sent = 0
    for _ in range(40):  # a new connection each: the kernel spreads them over both processes
        assert httpx.get(f"{serve_two}/health", timeout=10).status_code == 200
        sent += 1
    seen: list[float] = []
    deadline = time.monotonic() + 60
    while not seen or seen[-1] < sent:
        assert time.monotonic() < deadline, f"scrapes read {seen}, not {sent}"
        response: Any = httpx.get(f"{serve_two}/metrics", timeout=10)
        seen.append(health_count(response.text))
        time.sleep(0.05)
    for _ in range(10):
        seen.append(health_count(httpx.get(f"{serve_two}/metrics", timeout=10).text))
    assert seen == sorted(seen), seen
    assert seen[-1] >= sent


def test_a_method_of_its_own_is_counted_as_other() -> None:
    """h11 takes any token as a method: the labels stay a fixed set whatever clients send."""
    stats = RequestStats()
    for n in range(100):
        stats.observe(f"X{n}", "/health", 405, 0.001)
    stats.observe("GET", "/health", 200, 0.001)
    assert stats.codes == {("other", "/health", 405): 100, ("GET", "/health", 200): 1}

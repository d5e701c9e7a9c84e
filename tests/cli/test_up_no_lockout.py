"""Issue 36, finding 1, as it was found: `scheduler up` ran its agent in token mode, the agent
called GET /instances with its node token before every poll, the route took the key only,
and each call was a wrong key counted against 127.0.0.1; past AUTH_FAILURES_MAX the
operator's own `scheduler list` was 429. Reproduced with the real processes (`up`: API,
worker, agent; the command-line client), AUTH_FAILURES_MAX=2, the agent polling fast: no
agent call is refused, Redis counts no wrong credential, and `list` works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from scheduler.store.keys import Keys
from tests.cli.test_up import Up, _wait_for
from tests.keys import API_KEY


@pytest.fixture
def up_of(tmp_path: Path) -> Iterator[list[Up]]:
    """The `up` a test starts, killed if the test left it running."""
    started: list[Up] = []
    yield started
    for up in started:
        if up.proc.poll() is None:
            up.proc.kill()
            up.proc.wait()


def requests(url: str) -> dict[tuple[str, str, str], float]:
    """/metrics' request counts: (method, route, code) -> requests, every API process's."""
    scraped = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"})
    scraped.raise_for_status()
    return {
        (s.labels["method"], s.labels["route"], s.labels["code"]): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
        if s.name == "scheduler_http_requests_total"
    }


def calls(url: str, method: str, route: str) -> float:
    return sum(n for (m, r, _), n in requests(url).items() if (m, r) == (method, route))


def test_an_idle_up_never_locks_its_operator_out(
    tmp_path: Path, redis_url: str, prefix: str, up_of: list[Up]
) -> None:
    env = {
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": prefix,
        "TINYAWS_API_KEY": API_KEY,
        "AUTH_FAILURES_MAX": "2",
        # Polling without a long-poll (every 0.2 s, Up's): each a GET /instances and a GET
        # /jobs.
        "AGENT_POLL_WAIT_SECS": "0",
        "AGENT_HEARTBEAT_SECS": "0.2",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    up = Up(tmp_path / "data", tmp_path / "up.log", **env)
    up_of.append(up)
    for _ in range(3):
        submitted = up.cli("submit", "echo hi", "--wait", "--poll-secs", "0.2")
        assert submitted.returncode == 0, submitted.stderr
        assert submitted.stdout.splitlines()[-1] == "hi"
    # The agent polls on for a while: 50 polls, each a wrong key before (AUTH_FAILURES_MAX 2).
    _wait_for(lambda: [1] if calls(up.url, "GET", "/instances") >= 50 else [], timeout=120)
    listed = up.cli("list")
    assert listed.returncode == 0, listed.stderr
    assert all(f"job-{n}" in listed.stdout for n in (1, 2, 3)), listed.stdout
    refused = {k: n for k, n in requests(up.url).items() if k[2] in ("401", "403", "429")}
    assert not refused
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.get(Keys(prefix).auth_failures("127.0.0.1")) is None
        assert up.interrupt() == 0, up.log.read_text()
        # Its clean stop (drain, deregister) is no wrong credential either.
        assert client.get(Keys(prefix).auth_failures("127.0.0.1")) is None
    finally:
        client.close()
    assert "Traceback" not in up.log.read_text()

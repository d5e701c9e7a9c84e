"""A deployment rides out a Redis that answers BUSY or LOADING for many times the worker's
backoff cap (issue 36, Must have 4), as it rides out an outage (test_outage.py): the worker is
still running afterwards and goes on with its periodic work (a delayed job that came due
meanwhile is promoted), and said so in one WARNING (then one every ~30 s) and one INFO, not a
line per try; the API answered 503 to every call meanwhile, never 500, and serves after.

BUSY: another client runs a read-only script far past busy-reply-threshold (set to 100 ms on
this test's own Redis), as the 16 s cascade of issue 36 did. LOADING: DEBUG RELOAD with a
per-key load delay, so this Redis, reachable all along, answers LOADING to every command
until its data is read again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.fakes import eventually
from tests.processes import api_replicas, scheduler_env
from tests.redis_server import redis_server
from tests.workers.test_processes import BASE_ENV, Workers, run_periods
from workers.outage import BACKOFF_CAP_SECS, WARN_EVERY_SECS, redis_unavailable

UNAVAILABLE_SECS = 12  # six times the worker's backoff cap
assert UNAVAILABLE_SECS >= 5 * BACKOFF_CAP_SECS

# Spins on Redis's clock for ARGV[1] seconds, reading nothing: Redis answers everyone else BUSY.
SPIN = """
local t = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if tonumber(n[1]) - tonumber(t[1]) >= tonumber(ARGV[1]) then break end
end
return 1
"""
LOAD_DELAY_MICROS = 1000  # per key read back
BALLAST_KEYS = UNAVAILABLE_SECS * 1_000_000 // LOAD_DELAY_MICROS


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis of this test's own, the one it makes unavailable: DEBUG allowed (RELOAD), and
    BUSY answered 100 ms into a script."""
    with redis_server("--enable-debug-command", "yes", "--lua-time-limit", "100") as url:
        yield url


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    return scheduler_env(
        redis_url,
        prefix,
        **BASE_ENV,
        SCHEDULER_DB=str(tmp_path / "snapshot.db"),
        REGISTRY_URL="",
    )


def spin(client: redis.Redis) -> None:
    client.eval(SPIN, 0, UNAVAILABLE_SECS)


def reload_slowly(client: redis.Redis) -> None:
    client.execute_command("DEBUG", "RELOAD")


def prepare_reload(client: redis.Redis) -> None:
    """Each key read back waits LOAD_DELAY_MICROS, and Redis answers other clients (LOADING)
    every KiB read rather than every 2 MiB."""
    client.config_set("loading-process-events-interval-bytes", 1024)
    client.config_set("key-load-delay", LOAD_DELAY_MICROS)
    client.execute_command("DEBUG", "POPULATE", BALLAST_KEYS, "ballast")


HOW: dict[str, tuple[Callable[[redis.Redis], None], Callable[[redis.Redis], None], str]] = {
    "busy": (lambda client: None, spin, "BUSY"),
    "loading": (prepare_reload, reload_slowly, "loading"),
}


def answers_unavailable(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.RedisError as exc:
        return redis_unavailable(exc)
    return False


def calls(job_id: str) -> list[tuple[str, str, object]]:
    """A call of each kind an API serves: the hot lane's and Starlette's, a user's and an
    agent's; those that change `job_id` too (answered, they would change it)."""
    node = {"id": "n2", "hostname": "n2", "cpu_count": 2, "role": "compute"}
    return [
        ("GET", f"/jobs/{job_id}", None),
        ("POST", "/jobs", {"command": "echo meanwhile"}),
        ("GET", "/jobs?node_id=n1", None),
        ("PATCH", f"/jobs/{job_id}", {"status": "running"}),
        ("GET", "/jobs", None),
        ("DELETE", f"/jobs/{job_id}", None),
        ("POST", "/nodes/register", node),
        ("GET", "/nodes", None),
        ("GET", "/ui/nodes", None),
    ]


@pytest.mark.parametrize("how", sorted(HOW))
def test_a_deployment_rides_out_redis_answering_busy_or_loading(
    how: str, redis_url: str, env: dict[str, str], workers: Workers, prefix: str
) -> None:
    prepare, make_unavailable, said = HOW[how]
    client = redis.Redis.from_url(redis_url, socket_timeout=30 * UNAVAILABLE_SECS)
    probe = redis.Redis.from_url(redis_url, socket_timeout=10)
    prepare(client)
    with api_replicas(1, env) as (url,), httpx.Client(base_url=url, timeout=30) as api:
        node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
        assert api.post("/nodes/register", json=node).status_code == 201
        worker = workers.start()
        eventually(lambda: run_periods(probe, prefix, "promote"), timeout=60)
        # Due halfway through the unavailable spell.
        delayed = {"command": "echo due", "delay_secs": UNAVAILABLE_SECS / 2}
        job_id = api.post("/jobs", json=delayed).json()["job_id"]
        other = api.post("/jobs", json={"command": "echo other"}).json()["job_id"]

        unavailable = threading.Thread(target=make_unavailable, args=(client,))
        unavailable.start()
        eventually(lambda: answers_unavailable(probe), timeout=30)
        answered = []
        for method, path, body in calls(other):
            status = api.request(method, path, json=body).status_code
            if unavailable.is_alive():  # Redis answered nothing while this call was served
                answered.append((method, path, status))
        unavailable.join()

        assert answered, f"Redis was {how} for less time than a few calls"
        assert all(status == 503 for _, _, status in answered), answered
        assert worker.poll() is None, f"the worker exited: {workers.logs()}"

        def promoted() -> bool:
            return api.get(f"/jobs/{job_id}").json()["status"] == "pending"

        eventually(promoted, timeout=60)
        assert api.post("/jobs", json={"command": "echo after"}).status_code == 201
    assert worker.poll() is None, f"the worker exited: {workers.logs()}"

    log = workers.logs(tail=0)
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert any(said in line for line in warnings), log  # the worker met it
    assert " ERROR " not in log and "Traceback" not in log, log
    # One when it began, one every WARN_EVERY_SECS (the spell's own length, slack for a
    # slow machine), whichever thread met it: not one per try.
    assert len(warnings) <= 3 + UNAVAILABLE_SECS / WARN_EVERY_SECS, log
    assert "Redis answers again" in log, log

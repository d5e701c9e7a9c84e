"""`scheduler retry --failed` against a running API: it lists what it will retry and asks
(or --yes), refuses without a terminal, and leaves cancelled jobs alone unless asked."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import pytest

from scheduler.cli import retry as retry_cli
from tests.cli.conftest import Cli
from tests.cli.test_client import finish, register
from tests.processes import api_replicas, scheduler_env, unique_prefix


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    """One open API process of its own: its dead set is this module's. Its node, registered
    once, stays live however long the module takes (NODE_TTL_SECS)."""
    env = scheduler_env(redis_url, unique_prefix("cli-retry"), NODE_TTL_SECS="600")
    with api_replicas(1, env) as urls:
        register(urls[0], "node-1")
        yield urls[0]


class Terminal(io.StringIO):
    """stdin as a terminal the operator answers on."""

    def isatty(self) -> bool:
        return True


def failed_job(api: str, command: str = "exit 3") -> str:
    job_id: str = httpx.post(f"{api}/jobs", json={"command": command, "max_retries": 0}).json()[
        "job_id"
    ]
    finish(api, job_id, "failed", 3, "")
    return job_id


def cancelled_job(api: str) -> str:
    job_id: str = httpx.post(f"{api}/jobs", json={"command": "sleep 60"}).json()["job_id"]
    assert httpx.delete(f"{api}/jobs/{job_id}").json()["failure_reason"] == "cancelled"
    return job_id


def status(api: str, job_id: str) -> str:
    return str(httpx.get(f"{api}/jobs/{job_id}").json()["status"])


def test_failed_lists_asks_and_leaves_cancelled_jobs(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken, stopped = failed_job(api, "make test"), cancelled_job(api)

    # No terminal to ask on (as under pytest, or a pipe), no --yes: nothing changes.
    code, out, err = cli(api, "retry", "--failed")
    assert (code, out) == (1, "")
    assert f"  {broken}  exit 3  make test\n" in err
    assert "left alone: 1 cancelled (--include-cancelled retries them too)\n" in err
    assert err.endswith("error: nothing retried: no terminal to ask on; add --yes to retry them\n")
    assert status(api, broken) == status(api, stopped) == "failed"

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    code, out, err = cli(api, "retry", "--failed")
    assert (code, out) == (1, "")
    assert "retry these 1 job(s)? [y/N] " in err and status(api, broken) == "failed"

    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    code, out, err = cli(api, "retry", "--failed")
    assert (code, out) == (0, f"retried: {broken}\n")
    assert status(api, broken) == "pending" and status(api, stopped) == "failed"

    code, out, err = cli(api, "retry", "--failed", "--yes")
    assert (code, out, err) == (0, "", "retry: no failed job to retry (1 cancelled left alone)\n")

    code, out, err = cli(api, "retry", "--failed", "--include-cancelled", "--yes")
    assert (code, out) == (0, f"retried: {stopped}\n")
    assert f"  {stopped}  cancelled  sleep 60\n" in err and "left alone" not in err
    for job_id in (broken, stopped):
        httpx.delete(f"{api}/jobs/{job_id}")


def test_a_long_dead_set_is_counted_and_only_the_listed_jobs_are_sent(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retry_cli, "SHOWN", 2)
    jobs = [failed_job(api) for _ in range(3)]
    code, _, err = cli(api, "retry", "--failed", "-y", "--json")
    assert code == 0 and "retry: 3 failed job(s) to start over:\n" in err
    assert "  ... and 1 more\n" in err
    assert all(status(api, job_id) == "pending" for job_id in jobs)
    for job_id in jobs:
        httpx.delete(f"{api}/jobs/{job_id}")


def test_ids_are_retried_without_asking_but_not_with_failed(api: str, cli: Cli) -> None:
    job_id = failed_job(api)
    code, _, err = cli(api, "retry", job_id, "--failed", "--yes")
    assert (code, err) == (1, "retry: name job ids or --failed, not both\n")
    assert cli(api, "retry", job_id) == (0, f"retried: {job_id}\n", "")
    httpx.delete(f"{api}/jobs/{job_id}")

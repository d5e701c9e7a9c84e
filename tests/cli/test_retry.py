"""`scheduler retry --failed` against a running API: it lists what it will retry and asks
(or --yes), refuses without a terminal, and leaves cancelled jobs alone unless asked."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import pytest

from scheduler.cli import retry as retry_cli
from scheduler.client import Client, RetryAnswer
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


def test_ids_are_retried_without_asking_but_not_with_failed(
    api: str, cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = failed_job(api)
    for argv, said in (
        ([job_id, "--failed", "--yes"], "name job ids or --failed, not both"),
        ([], "no job to retry: name job ids, or --failed"),
    ):
        with pytest.raises(SystemExit) as refused:  # a usage error, nothing sent
            cli(api, "retry", *argv)
        assert refused.value.code == 2
        assert capsys.readouterr().err.endswith(f"scheduler retry: error: {said}\n")
    assert cli(api, "retry", job_id) == (0, f"retried: {job_id}\n", "")
    httpx.delete(f"{api}/jobs/{job_id}")


def test_each_job_not_retried_is_said_as_every_error_with_why(api: str, cli: Cli) -> None:
    """They were lines on stdout in a style of their own (`not found: job-9999`, `blocked:
    job-36`, with no word of why): now an error each on stderr, saying why."""
    first = failed_job(api)
    after = {"command": "then", "after": [first], "max_retries": 0}
    then = httpx.post(f"{api}/jobs", json=after).json()["job_id"]
    assert httpx.get(f"{api}/jobs/{then}").json()["failure_reason"] == "dependency_failed"
    running = httpx.post(f"{api}/jobs", json={"command": "sleep 60"}).json()["job_id"]
    httpx.patch(f"{api}/jobs/{running}", json={"status": "running"}).raise_for_status()
    code, out, err = cli(api, "retry", then, running, "job-999999")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: job-999999: job not found",
        f"error: {running} is running, not failed: nothing to retry",
        f"error: {then}: blocked: a job it runs after has failed ({first}): retry that one first",
    ]
    # Retried: stdout as before; the others on stderr.
    code, out, err = cli(api, "retry", first, running)
    assert (code, out) == (1, f"retried: {first}\n")
    assert err == f"error: {running} is running, not failed: nothing to retry\n"
    for job_id in (first, then, running):
        httpx.delete(f"{api}/jobs/{job_id}")


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            RetryAnswer([], [], [], [], ["job-36"], blocked_by={"job-36": "job-25"}),
            "error: job-36: blocked: a job it runs after has failed (job-25): retry that one first",
        ),
        # An earlier scheduler's answer names no dependency.
        (
            RetryAnswer([], [], [], [], ["job-36"]),
            "error: job-36: blocked: a job it runs after did not succeed",
        ),
        (
            RetryAnswer([], [], [], ["job-5"], []),
            "error: job-5: no healthy compute nodes (`scheduler nodes` lists them)",
        ),
        (
            RetryAnswer([], [], [], [], [], too_many_waiters=["job-7"]),
            "error: job-7: a job it runs after is waited for by too many jobs already",
        ),
    ],
)
def test_why_a_job_was_not_retried(answer: RetryAnswer, said: str) -> None:
    name = next(n for n in retry_cli.ANSWERS if getattr(answer, n, None))
    (job_id,) = getattr(answer, name)
    with Client("http://127.0.0.1:9") as nowhere:  # not called: only not_failed reads a job
        assert retry_cli.refusal(nowhere, answer, name, job_id) == said + "\n"

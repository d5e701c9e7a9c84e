"""What the CLI says of an answer that is not what the user expected, against a running API:
a job that has failed as it was submitted, a listing by an unknown node, a schedule paused
or resumed twice."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from scheduler.cli.output import ended_warning
from tests.cli.conftest import Cli
from tests.cli.test_client import finish, register
from tests.processes import api_replicas, scheduler_env, unique_prefix


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    """One open API process of its own, with a node that stays live (NODE_TTL_SECS)."""
    env = scheduler_env(redis_url, unique_prefix("cli-says"), NODE_TTL_SECS="600")
    with api_replicas(1, env) as urls:
        register(urls[0], "node-1")
        yield urls[0]


def failed(api: str) -> str:
    job_id: str = httpx.post(f"{api}/jobs", json={"command": "exit 3", "max_retries": 0}).json()[
        "job_id"
    ]
    finish(api, job_id, "failed", 3, "")
    return job_id


def test_a_job_submitted_after_a_failed_one_is_said_failed_and_exits_1(api: str, cli: Cli) -> None:
    """It printed `submitted job-36 on node vm (status=failed)` and exited 0."""
    first = failed(api)
    code, out, err = cli(api, "submit", "echo next", "--after", first)
    job_id = out.split()[1]
    assert (code, out) == (1, f"submitted {job_id} on node node-1 (status=failed)\n")
    assert err == (
        f"warning: {job_id} has already failed (dependency_failed): a job it runs after "
        f"failed, so it never ran (it runs after {first}: retry the one that failed and this "
        "one)\n"
    )
    # --wait: the same warning, and the job's end as ever (no exit code of its own: 1).
    code, out, err = cli(api, "submit", "echo next", "--after", first, "--wait")
    assert (code, out) == (1, "")
    assert "has already failed (dependency_failed)" in err.splitlines()[1]
    # A job with nothing against it: nothing to warn of.
    code, out, err = cli(api, "submit", "echo fine")
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    ("job", "said"),
    [
        # An --idempotency-key's job, ended since: said in the job page's words.
        (
            {"job_id": "job-9", "status": "failed", "failure_reason": "timed_out"},
            "warning: job-9 has already failed (timed_out): ran past its timeout "
            "(JOB_TIMEOUT_SECS) and was stopped\n",
        ),
        # Its own command's failure, the exit 1 said why (it was silent on stderr).
        (
            {"job_id": "job-9", "status": "failed", "exit_code": 3},
            "warning: job-9 has already failed: its command exited with code 3 (the job this "
            "key made)\n",
        ),
        (
            {"job_id": "job-9", "status": "failed"},
            "warning: job-9 has already failed: it failed (the job this key made)\n",
        ),
        ({"job_id": "job-9", "status": "pending"}, ""),
    ],
)
def test_the_warning_of_a_job_already_failed(job: dict[str, object], said: str) -> None:
    assert ended_warning(job) == said


def test_a_listing_by_an_unknown_node_says_so(api: str, cli: Cli) -> None:
    """It printed nothing and exited 0, where `drain nope` says `node not found`."""
    said = "error: node nope not found (`scheduler nodes` lists them)\n"
    assert cli(api, "list", "--node-id", "nope") == (1, "", said)
    assert cli(api, "list", "--node-id", "nope", "--json") == (1, "[]\n", said)
    # A known node none of whose jobs match: said, exit 0.
    said = "no jobs on node node-1 match\n"
    assert cli(api, "list", "--node-id", "node-1", "--status", "running") == (0, "", said)
    # Jobs listed: not a word more.
    httpx.post(f"{api}/jobs", json={"command": "true"}).raise_for_status()
    code, out, err = cli(api, "list", "--node-id", "node-1")
    assert (code, err) == (0, "") and out

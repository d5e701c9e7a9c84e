"""`scheduler namespace quota|list` against a running API process with TINYAWS_API_KEY set:
a quota set and listed with each namespace's use, a submit past it refused as the API says,
and a submitter's quota refused (403); through the client, both clients' ops too."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from scheduler.cli import quotas as quotas_cli
from scheduler.models.quota import Quota
from tests.cli.conftest import Cli
from tests.cli.test_client import KEY
from tests.processes import api_replicas, scheduler_env, unique_prefix


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    env = scheduler_env(redis_url, unique_prefix("cli-quotas"), TINYAWS_API_KEY=KEY)
    with api_replicas(1, env) as urls:
        yield urls[0]


@pytest.fixture(autouse=True)
def admin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYAWS_API_KEY", KEY)


def test_a_quota_is_set_listed_and_refuses_a_submit_past_it(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(api, "namespace", "quota", "team-a", "--pending", "1", "--cpus", "4")
    assert (code, out, err) == (0, "namespace team-a: quota pending=1 cpus=4\n", "")
    set_ = json.loads(cli(api, "namespace", "quota", "team-b", "--running", "2", "--json")[1])
    assert set_ == {"running": 2}
    # No node is registered: a job that asks a cpu waits unplaced rather than 503.
    assert cli(api, "submit", "true", "--namespace", "team-a", "--cpus", "1")[0] == 0
    code, out, err = cli(api, "submit", "true", "--namespace", "team-a", "--cpus", "1")
    # The quota's refusal, and no hint about the key (a 429 of too many wrong keys has one).
    assert (code, out) == (1, "") and err == (
        "error: over quota: namespace 'team-a' holds 1 pending jobs (pending, "
        "delayed or waiting) and its quota allows 1; nothing was made (429)\n"
    )

    code, out, _ = cli(api, "namespace", "list")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and rows[0] == [
        "NAMESPACE",
        "RUNNING",
        "PENDING",
        "CPUS",
        "MEMORY_MB",
        "WAITING_QUOTA",
    ]
    assert ["team-a", "0", "1/1", "0/4", "0", "0"] in rows
    assert ["team-b", "0/2", "0", "0", "0", "0"] in rows
    listed = json.loads(cli(api, "namespace", "list", "--json")[1])
    assert {v["name"]: v["quota"] for v in listed}["team-a"] == {"pending": 1, "cpus": 4}

    # No limit given: the quota is shown, and stays; a limit given changes it alone.
    for argv, said in (
        ([], "pending=1 cpus=4"),
        (["--running", "3"], "running=3 pending=1 cpus=4"),
        (["--pending", "0"], "running=3 cpus=4"),
        (["--clear"], "none"),
        ([], "none"),
    ):
        code, out, err = cli(api, "namespace", "quota", "team-a", *argv)
        assert (code, out, err) == (0, f"namespace team-a: quota {said}\n", ""), argv
    code, out, err = cli(api, "namespace", "quota", "team-a", "--clear", "--cpus", "2")
    assert (code, out) == (1, "")
    assert err == "error: --clear removes every limit: give no other\n"

    code, out, _ = cli(api, "key", "add", "ci", "--role", "submitter")
    monkeypatch.setenv("TINYAWS_API_KEY", out.strip())
    code, out, err = cli(api, "namespace", "quota", "team-a", "--running", "100")
    assert (code, out) == (1, "")
    assert err.startswith("error: forbidden: the key 'ci' ")
    assert cli(api, "namespace", "list")[0] == 0


def test_a_limit_given_is_merged_on_the_server_not_over_a_stale_read(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two admins at once: one sets cpus while the other, who read the quota before that,
    sets running. The CLI sends only the limit given (PATCH), so the first's cpus stays; a
    read-then-set would write back the quota as the second read it, losing cpus."""
    assert cli(api, "namespace", "quota", "team-m", "--cpus", "4")[0] == 0
    stale = Quota()  # what the second admin's CLI would have read, before cpus was set
    monkeypatch.setattr(quotas_cli, "current_quota", lambda client, namespace: stale)
    code, out, err = cli(api, "namespace", "quota", "team-m", "--running", "3")
    assert (code, out, err) == (0, "namespace team-m: quota running=3 cpus=4\n", "")

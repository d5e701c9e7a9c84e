"""Ctrl-C during a wait (`submit --wait`, `status --wait`, `logs -f`) stops the waiting, not
the job: the command says so on stderr, with how to follow the job again or stop it, and
exits 130 (128 + SIGINT, as a shell's). It ended silently, as if the job had been stopped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from scheduler.client import Client, Job
from tests.cli.conftest import Cli

# Never reached: every call that would reach it is replaced.
NOWHERE = "http://127.0.0.1:9"
REST = {"retry_count": 0, "created_at": "2026-12-06T22:00:00Z"}


def _interrupted(*args: Any, **kwargs: Any) -> Iterator[Any]:
    raise KeyboardInterrupt
    yield  # a generator, as the client's feeds


def _submitted(self: Client, command: str = "", **fields: Any) -> Job:
    return msgspec.convert(
        {"job_id": "job-62", "node_id": "vm", "status": "pending", "command": command, **REST},
        Job,
    )


@pytest.fixture
def waits_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every wait of the client is interrupted as it starts (Ctrl-C); a submit makes job-62."""
    monkeypatch.setattr(Client, "submit", _submitted)
    monkeypatch.setattr(Client, "watch", _interrupted)
    monkeypatch.setattr(Client, "follow_logs", _interrupted)


@pytest.mark.parametrize(
    ("argv", "follow"),
    [
        (["submit", "sleep 60", "--wait"], "scheduler status job-62 --wait"),
        (["status", "job-62", "--wait"], "scheduler status job-62 --wait"),
        (["logs", "-f", "job-62"], "scheduler logs -f job-62"),
    ],
)
def test_ctrl_c_during_a_wait_says_the_job_keeps_running_and_exits_130(
    waits_interrupted: None, cli: Cli, argv: list[str], follow: str
) -> None:
    code, out, err = cli(NOWHERE, *argv)
    assert code == 130 and out == ""
    assert err.splitlines()[-1] == f"job-62 keeps running: {follow}, or scheduler cancel job-62"


def test_ctrl_c_before_the_job_is_made_says_nothing_of_a_job(
    monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    """Interrupted before the scheduler answered: there is no job id to name."""

    def interrupted_submit(self: Client, command: str = "", **fields: Any) -> Job:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "submit", interrupted_submit)
    assert cli(NOWHERE, "submit", "sleep 60", "--wait") == (130, "", "")

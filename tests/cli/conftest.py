"""The CLI's tests' fixture: `scheduler ARGV...` run in-process against an API."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.cli.main import main

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """`scheduler ARGV...` in-process against `url`: (exit status, stdout, stderr)."""

    def run(url: str, *argv: str) -> tuple[int, str, str]:
        monkeypatch.setenv("SCHEDULER_URL", url)
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run

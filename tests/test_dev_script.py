"""`./dev`: running the product installs only what it runs; the test tools come with the
first `./dev test` (issue 25). The script runs in a copy of the checkout whose .venv holds a
stand-in python, pytest and scheduler that only note how they were called, so no package is
fetched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "scheduler"):
        (bin_dir / name).write_text(STAND_IN.format(log=tmp_path / "calls.log"))
        (bin_dir / name).chmod(0o755)
    return tmp_path


def run_dev(
    checkout: Path, *args: str, env: dict[str, str] | None = None, code: int = 0
) -> tuple[list[str], str]:
    log = checkout / "calls.log"
    log.unlink(missing_ok=True)
    inherited = {k: v for k, v in os.environ.items() if k != "TEST_PROCESSES"}
    done = subprocess.run(
        [str(checkout / "dev"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**inherited, **(env or {})},
        check=False,
    )
    assert done.returncode == code, done.stderr
    return (log.read_text().splitlines() if log.exists() else []), done.stderr


def test_alone_it_says_what_it_does_and_starts_nothing(checkout: Path) -> None:
    """A newcomer's `./dev`, to see what it is, started the whole product."""
    calls, said = run_dev(checkout, code=2)
    assert calls == []  # nothing installed, nothing run
    assert said.startswith("usage: ./dev up | ./dev test")
    assert "./dev up                 the whole product on this machine" in said


def installs(calls: list[str]) -> list[str]:
    return [c for c in calls if " install " in c and " -e " in c]


def test_up_installs_the_product_without_the_test_tools(checkout: Path) -> None:
    calls, said = run_dev(checkout, "up")
    assert installs(calls) == [f"python -m pip install --progress-bar off -e {checkout}[embedded]"]
    assert calls[-1] == "scheduler up"
    assert "installing the scheduler and what it runs" in said


def test_a_second_up_installs_nothing(checkout: Path) -> None:
    run_dev(checkout, "up")
    calls, said = run_dev(checkout, "submit", "echo hi", "--wait")
    assert calls == ["scheduler submit echo hi --wait"]
    assert said == ""


def test_test_installs_the_test_tools_then_up_needs_nothing_more(checkout: Path) -> None:
    calls, _ = run_dev(checkout, "test", "-q")
    assert installs(calls) == [
        f"python -m pip install --progress-bar off -e {checkout}[test,dashboard,embedded]"
    ]
    # The suite in three processes (pytest-xdist); arguments come after, so `-n 0` overrides.
    assert calls[-1] == "python -m pytest -n 3 --dist worksteal -q"
    calls, _ = run_dev(checkout, "up")
    assert calls == ["scheduler up"]


def test_test_processes_sets_how_many_run_the_suite(checkout: Path) -> None:
    calls, _ = run_dev(checkout, "test", "-x", env={"TEST_PROCESSES": "0"})
    assert calls[-1] == "python -m pytest -n 0 --dist worksteal -x"


def test_a_changed_pyproject_installs_again(checkout: Path) -> None:
    run_dev(checkout, "up")
    later = (checkout / ".venv" / ".installed-run").stat().st_mtime + 10
    os.utime(checkout / "pyproject.toml", (later, later))
    calls, _ = run_dev(checkout, "up")
    assert len(installs(calls)) == 1

"""Fixtures of the worker tests that run `scheduler worker` processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workers.test_processes import Workers


@pytest.fixture
def workers(env: dict[str, str], tmp_path: Path) -> Iterator[Workers]:
    """A group of worker processes on the requesting module's `env`, stopped after the test."""
    group = Workers(env, tmp_path)
    try:
        yield group
    finally:
        group.stop_all()
        print(group.logs())  # shown by pytest for a failing test

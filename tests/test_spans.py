"""Lengths of time as people type them (models/spans.py seconds_of): the CLI's --delay,
--retry-backoff and --every."""

from __future__ import annotations

import pytest

from scheduler.models.spans import seconds_of


@pytest.mark.parametrize(
    ("typed", "secs"),
    [
        ("90", 90.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("30m1h", 5400.0),  # any order: the parts add up
        ("2d", 172800.0),
        ("1.5h", 5400.0),
        ("1H", 3600.0),
        (" 5m ", 300.0),
    ],
)
def test_a_length_is_read_in_seconds(typed: str, secs: float) -> None:
    assert seconds_of(typed) == secs


@pytest.mark.parametrize(
    "typed", ["", "-5", "5x", "5 m", "m", "1h30", "1e3", "inf", "nan", "5min", "1,5", "+5"]
)
def test_what_is_not_a_length_is_none(typed: str) -> None:
    assert seconds_of(typed) is None

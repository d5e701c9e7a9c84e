from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.timefmt import parse_rfc3339, rfc3339


def _reference(epoch: float) -> str:
    return datetime.fromtimestamp(round(epoch * 1e6) / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    "epoch",
    [0.0, 1.5, 59.9999995, 60.0, 1_764_000_000.123456, 1_764_000_000.9999996, -1.5, 4e9],
)
def test_rfc3339_matches_strftime_across_second_boundaries(epoch: float) -> None:
    assert rfc3339(epoch) == _reference(epoch)


def test_rfc3339_cached_second_does_not_leak_into_the_next() -> None:
    assert rfc3339(100.25).startswith("1970-01-01T00:01:40.")
    assert rfc3339(101.25) == "1970-01-01T00:01:41.250000Z"
    assert rfc3339(100.75) == "1970-01-01T00:01:40.750000Z"


@pytest.mark.parametrize(
    "text, epoch",
    [
        ("2026-01-01T10:00:00Z", 1_767_261_600.0),
        ("2026-01-01T10:00:00.5Z", 1_767_261_600.5),
        ("2026-01-01T10:00:00.123456789Z", 1_767_261_600.123456),
        ("2026-01-01T11:00:00+01:00", 1_767_261_600.0),
    ],
)
def test_parse_rfc3339_reads_every_form_the_original_wrote(text: str, epoch: float) -> None:
    assert parse_rfc3339(text) == pytest.approx(epoch, abs=1e-6)

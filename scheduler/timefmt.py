"""Timestamps on the wire: RFC 3339, UTC, `Z` suffix (CONTRACT 2.2)."""

from __future__ import annotations

from datetime import UTC, datetime

# (second, its formatted text): one tuple, swapped whole, so threads never see half of it.
_last_second: list[tuple[int, str]] = [(-1, "")]


def rfc3339(epoch: float) -> str:
    """Microsecond precision; the original's clients accept any fraction, or none."""
    second, micros = divmod(round(epoch * 1_000_000), 1_000_000)
    # strftime is a visible share of a submit's CPU; the seconds part changes once a second.
    cached = _last_second[0]
    if cached[0] != second:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        cached = _last_second[0] = (second, text)
    return f"{cached[1]}.{micros:06d}Z"


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of a timestamp in any RFC 3339 form the original wrote (with or without a
    fraction, `Z` or an offset, up to nanoseconds)."""
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        frac, zone = rest[:digits], rest[digits:]
        text = f"{head}.{frac[:6].ljust(6, '0')}{zone}"
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

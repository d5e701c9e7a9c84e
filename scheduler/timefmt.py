"""Timestamps on the wire: RFC 3339, UTC, `Z` suffix (CONTRACT 2.2)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch: float) -> str:
    """Microsecond precision; the original's clients accept any fraction, or none."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of a timestamp in any RFC 3339 form the original wrote (with or without a
    fraction, `Z` or an offset, up to nanoseconds)."""
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        frac, zone = rest[:digits], rest[digits:]
        text = f"{head}.{frac[:6].ljust(6, '0')}{zone}"
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

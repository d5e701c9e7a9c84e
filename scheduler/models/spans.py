"""A length of time in words, as the web UI and the CLI say one (`span`): the job page's
"ran for", the dashboard's ages, `logs -f`'s "delayed until 20:37:05 (in 4 min)"; and as
people type one (`seconds_of`): the CLI's --delay 1h, --every 5m."""

from __future__ import annotations

import re

# A length typed in units, largest first or not: 90s, 5m, 1h30m, 2d, 1.5h.
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_IN_UNITS = re.compile(r"(?:\d+(?:\.\d+)?[dhms])+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_PLAIN = re.compile(r"\d+(?:\.\d+)?")
DURATION_RULE = "use seconds (90) or a length such as 90s, 5m, 1h30m, 2d"


def seconds_of(text: str) -> float | None:
    """`text` as seconds: a number of them (90, 1.5) or a length in units (90s, 5m, 1h30m,
    2d); None when it is neither (a sign, a space, another unit)."""
    text = text.strip().lower()
    if _PLAIN.fullmatch(text):
        return float(text)
    if not _IN_UNITS.fullmatch(text):
        return None
    return sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))


def span(secs: float) -> str:
    """A length of time in its two largest units: 250 ms, 1.5 s, 42 s, 3 min 5 s, 2 h 10 min,
    3 d 4 h."""
    if secs < 1:
        return f"{secs * 1000:.0f} ms"
    whole = int(secs)
    if secs < 10 and whole != secs:
        return f"{secs:.1f} s"
    units = [("d", 86400), ("h", 3600), ("min", 60), ("s", 1)]
    parts: list[str] = []
    for name, size in units:
        if whole >= size or (name == "s" and not parts):
            parts.append(f"{whole // size} {name}")
            whole %= size
        elif parts:
            break
        if len(parts) == 2:
            break
    return " ".join(parts)

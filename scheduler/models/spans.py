"""A length of time in words, as the web UI and the CLI say one (`span`): the job page's
"ran for", the dashboard's ages, `logs -f`'s "delayed until 20:37:05 (in 4 min)"."""

from __future__ import annotations


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

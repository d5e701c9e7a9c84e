"""The dashboard's per-minute series (docs/ARCHITECTURE.md, `{P}:series:<minute>`): what a
minute's hash holds, and the arithmetic on it (columns of several minutes, percentiles from
the wait buckets). The scripts write the hashes (series.lua); the web UI
draws them (api/ui_dashboard.py). Pure: no I/O."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Upper bounds (s) of the buckets of a first attempt's wait from submit (or its run_at) to
# running; a last bucket holds the longer ones. Fixed, so any minute's buckets add up.
WAIT_BOUNDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
BUCKETS = len(WAIT_BOUNDS) + 1
COUNTS = ("submitted", "started", "done", "failed")  # summed over a column's minutes
GAUGES = ("waiting", "running")  # a column shows its last minute's value
# A minute's hash holds no "started": each claim is one count, a first attempt's in its wait
# bucket, any other's in OTHER_STARTS; started is their sum.
WAITS = tuple(f"wait:{i}" for i in range(BUCKETS))
OTHER_STARTS = "started:other"


def minute_of(epoch: float) -> int:
    """The minute a time falls in: the number in its hash's key (as the Lua computes it)."""
    return math.floor(epoch / 60)


@dataclass(frozen=True, slots=True)
class Column:
    """`minutes` minutes from `first` (a minute number): their counts, last gauges (None:
    no change recorded in them) and wait buckets."""

    first: int
    minutes: int
    counts: dict[str, int]
    gauges: dict[str, int | None]
    waits: tuple[int, ...]

    def percentile(self, q: float) -> float | None:
        return percentile(self.waits, q)


def column(first: int, rows: Sequence[Mapping[str, int]]) -> Column:
    """The minutes `rows` (each a minute's hash, {} for none) as one column from `first`."""
    waits = tuple(sum(row.get(name, 0) for row in rows) for name in WAITS)
    counts = {name: sum(row.get(name, 0) for row in rows) for name in COUNTS}
    counts["started"] = sum(waits) + sum(row.get(OTHER_STARTS, 0) for row in rows)
    gauges: dict[str, int | None] = dict.fromkeys(GAUGES)
    for row in rows:
        for name in GAUGES:
            if name in row:
                gauges[name] = row[name]
    return Column(first, len(rows), counts, gauges, waits)


def columns(first: int, rows: Sequence[Mapping[str, int]], width: int) -> list[Column]:
    """Consecutive minutes from `first`, `width` of them to a column (the day's 1440 minutes
    drawn as 96 columns of 15); the last column may be narrower."""
    return [column(first + i, rows[i : i + width]) for i in range(0, len(rows), width)]


def percentile(waits: Sequence[int], q: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile (0 < q <= 1) of the waits: a wait
    no longer than that (math.inf: past the last bound); None when there are none. An upper
    bound, not a guess inside the bucket: the figure never flatters."""
    total = sum(waits)
    if total == 0:
        return None
    rank = math.ceil(q * total)
    seen = 0
    for i, count in enumerate(waits):
        seen += count
        if seen >= rank:
            return WAIT_BOUNDS[i] if i < len(WAIT_BOUNDS) else math.inf
    return math.inf


def filled(gauges: Sequence[int | None], now: int) -> list[int | None]:
    """A gauge's values per column: a column without a sample carries the one before (None
    before the first: not known), and the last column is `now`'s live value."""
    out: list[int | None] = []
    last: int | None = None
    for value in gauges:
        last = last if value is None else value
        out.append(last)
    if out:
        out[-1] = now
    return out

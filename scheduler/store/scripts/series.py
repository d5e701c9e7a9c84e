"""READ_SERIES: the dashboard's minutes (series.lua writes them), read in one round trip,
with its call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.store.scripts.script import Call, Script

Minute = dict[str, int]


def _minutes(reply: list[Any]) -> list[Minute]:
    return [
        {str(flat[i], "utf-8"): int(flat[i + 1]) for i in range(0, len(flat), 2)} for flat in reply
    ]


READ_SERIES = Script(
    "READ_SERIES",
    "first count",
    _minutes,
    read_only=True,
)


def read_series(first: int, count: int) -> Call[list[Minute]]:
    return READ_SERIES.call(first=first, count=count)


def merged(shards: Sequence[list[Minute]]) -> list[Minute]:
    """The same minutes read from each of a deployment's shards, their counts added up."""
    whole: list[Minute] = [{} for _ in shards[0]] if shards else []
    for minutes in shards:
        for total, minute in zip(whole, minutes, strict=True):
            for name, count in minute.items():
                total[name] = total.get(name, 0) + count
    return whole

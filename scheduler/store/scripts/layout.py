"""The scripts of a sharded deployment's layout (store/shards.py, store/sharded.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.store.errors import LayoutChanged, StoreNotReady
from scheduler.store.scripts.codes import NOT_READY
from scheduler.store.scripts.replies import pairs
from scheduler.store.scripts.script import Call, Script
from scheduler.store.shards import PINNED


@dataclass(frozen=True, slots=True)
class Recorded:
    """A sharded deployment's layout as recorded on shard 0 (store/shards.py): its shard
    count; its floors: ids up to `floor` (services: `service_floor`) are shard 0's, and every
    shard draws its numbers above `counters` (services: `service_counters`), shard 0's
    counters when it was first sharded (ids of jobs pruned since are never made again); when
    (`since`, epoch seconds); and the nodes registered then (kept on shard 0 with their
    queues, tokens and jobs)."""

    count: int = 0
    floor: int = 0
    service_floor: int = 0
    counters: int = 0
    service_counters: int = 0
    since: float = 0.0
    pinned: frozenset[str] = frozenset()


_NUMBERS = ("count", "floor", "service_floor", "counters", "service_counters")
FILED = "filed"  # the record's `since` that shard 0's snapshot file holds (snapshot/layout.py)


def recorded_of(flat: list[Any]) -> Recorded:
    """The record from its hash, flat (HGETALL; empty: not sharded yet, count 0)."""
    fields = pairs(flat)
    pinned = frozenset(name.removeprefix(PINNED) for name in fields if name.startswith(PINNED))
    count, floor, service_floor, counters, service_counters = (
        int(fields.get(name) or 0) for name in _NUMBERS
    )
    since = float(fields.get("since") or 0)
    return Recorded(count, floor, service_floor, counters, service_counters, since, pinned)


def check_count(recorded: bytes | str | None, count: int) -> None:
    """Refuses the shard count `count` when the deployment recorded (its `count` field, as
    HGET answers it or the snapshot file holds it) another one at its first sharded start;
    none recorded: never sharded."""
    was = int(recorded or 0)
    if was not in (0, count):
        raise LayoutChanged(count, was)


def _recorded(reply: list[Any]) -> Recorded:
    if reply[0] == NOT_READY:
        raise StoreNotReady()
    return recorded_of(reply[1])


RECORD_SHARDS = Script(
    "RECORD_SHARDS",
    "count floor service_floor now",
    _recorded,
)


def record_shards(count: int, floor: int, service_floor: int, now: float) -> Call[Recorded]:
    return RECORD_SHARDS.call(count=count, floor=floor, service_floor=service_floor, now=now)

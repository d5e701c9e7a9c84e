"""The scripts of a sharded deployment's layout (store/shards.py, store/sharded.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Recorded:
    """A sharded deployment's layout as recorded on shard 0 (store/shards.py Layout): its
    shard count, its floors, and the nodes registered before it was sharded (kept on shard 0
    with their queues, tokens and jobs)."""

    count: int
    floor: int
    service_floor: int
    pinned: frozenset[str]


_NUMBERS = ("count", "floor", "service_floor")


def recorded_of(reply: list[Any]) -> Recorded:
    """The record from its hash, flat (HGETALL; empty: not sharded yet, count 0)."""
    fields = {str(reply[i], "utf-8"): reply[i + 1] for i in range(0, len(reply), 2)}
    pinned = frozenset(name[5:] for name in fields if name.startswith("node:"))
    count, floor, service_floor = (int(fields.get(name) or 0) for name in _NUMBERS)
    return Recorded(count, floor, service_floor, pinned)


RECORD_SHARDS = Script(
    "RECORD_SHARDS",
    "count floor service_floor",
    """
-- On shard 0, at every start of a sharded deployment: the first records its shard count, its
-- floors (store/sharded.py finds them: ids up to one are shard 0's) and, as fields
-- "node:<id>", the nodes registered then, which stay on shard 0. Every later start reads it.
-- Returns the record, flat
if redis.call("HSETNX", K.shards, "count", count) == 1 then
  redis.call("HSET", K.shards, "floor", floor, "service_floor", service_floor)
  for _, node in ipairs(redis.call("HKEYS", K.nodes)) do
    redis.call("HSET", K.shards, "node:" .. node, 1)
  end
end
return redis.call("HGETALL", K.shards)
""",
    recorded_of,
)


def record_shards(count: int, floor: int, service_floor: int) -> Call[Recorded]:
    return RECORD_SHARDS.call(count=count, floor=floor, service_floor=service_floor)


RAISE_COUNTERS = Script(
    "RAISE_COUNTERS",
    "floor service_floor",
    """
-- On every shard, at every start of a sharded deployment: its counters at least the floors,
-- so each number it draws (counter x shards + index) lies above them and routes to it.
-- Returns OK
local function raise(key, least)
  if tonumber(redis.call("GET", key) or "0") < tonumber(least) then
    redis.call("SET", key, least)
  end
end
raise(K.job_seq, floor)
raise(K.service_seq, service_floor)
return OK
""",
    lambda reply: None,
)


def raise_counters(floor: int, service_floor: int) -> Call[None]:
    return RAISE_COUNTERS.call(floor=floor, service_floor=service_floor)

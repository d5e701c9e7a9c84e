"""The scripts of a sharded deployment's layout (store/shards.py, store/sharded.py)."""

from __future__ import annotations

from typing import Any

from scheduler.store.scripts.script import Call, Script


def _numbers(reply: list[Any]) -> tuple[int, int, int]:
    count, floor, service_floor = (int(value or 0) for value in reply)
    return count, floor, service_floor


RECORD_SHARDS = Script(
    "RECORD_SHARDS",
    "count",
    """
-- On shard 0, at every start of a sharded deployment: the first records its shard count, and
-- as its floors the job and service numbers drawn so far (all of them shard 0's: ids up to a
-- floor stay there, store/shards.py Layout). Every later start reads what was recorded.
-- Returns {count, floor, service_floor} as recorded
if redis.call("HSETNX", K.shards, "count", count) == 1 then
  local jobs = redis.call("GET", K.job_seq) or "0"
  local services = redis.call("GET", K.service_seq) or "0"
  redis.call("HSET", K.shards, "floor", jobs, "service_floor", services)
end
return redis.call("HMGET", K.shards, "count", "floor", "service_floor")
""",
    _numbers,
)


def record_shards(count: int) -> Call[tuple[int, int, int]]:
    return RECORD_SHARDS.call(count=count)


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

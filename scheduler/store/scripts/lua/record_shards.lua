--- @include "codes"
--- @include "keys"
--- @include "PINNED"

-- On shard 0, at a sharded deployment's first start once shard 0 holds its data (restored
-- from its snapshot first, if it lost it: else the floors would be found in an empty
-- shard): its shard count, its floors (store/sharded.py finds them), shard 0's counters
-- then, when, and as fields PINNED<id> its nodes then (registered, or seen in an external
-- registry), which stay on shard 0. Every later start reads it.
-- Returns {OK, the record, flat} | {NOT_READY}
if redis.call("EXISTS", K.initialised) == 0 then return {NOT_READY} end
if redis.call("HSETNX", K.shards, "count", count) == 1 then
  local function at_least(key, least)
    return math.max(tonumber(redis.call("GET", key) or "0"), tonumber(least))
  end
  redis.call("HSET", K.shards, "floor", floor, "service_floor", service_floor, "since", now,
    "counters", at_least(K.job_seq, floor),
    "service_counters", at_least(K.service_seq, service_floor))
  for _, node in ipairs(redis.call("HKEYS", K.nodes)) do
    redis.call("HSET", K.shards, PINNED .. node, 1)
  end
  for _, node in ipairs(redis.call("ZRANGE", K.nodes_compute, 0, -1)) do
    redis.call("HSET", K.shards, PINNED .. node, 1)
  end
end
return {OK, redis.call("HGETALL", K.shards)}

--- @include "codes"
--- @include "keys"
--- @include "ELSEWHERE"
--- @include "dedup_key_of"

-- A keyed create's pass over a shard that may not make its job (store/shard_placement.py
-- keyed): the Redis and the key checked as CREATE_JOB checks them, and where the key is new,
-- marked ELSEWHERE as a shard with no node for the job marks it, so a replay passes on from
-- here too.
-- Returns {DUPLICATE, the head of the job made ("": gone)} | {MISMATCH} | {NO_NODES}
--   | {NOT_READY}
local function unmade(reply) return reply end
--- @insert "ready"
local dedup = dedup_key_of(dedup_space, dedup_key)
local seen = redis.call("GET", dedup)
--- @insert "key_seen"
redis.call("SET", dedup, ELSEWHERE, "EX", tonumber(dedup_ttl))
return {NO_NODES}

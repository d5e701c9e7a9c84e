--- @include "ELSEWHERE"
--- @include "dedup_key_of"

-- A keyed create's mark taken back when no shard made its job (store/shard_placement.py
-- keyed): only while it reads ELSEWHERE, never the job another request under the key made
-- here since.
-- Returns 1 (taken back) | 0 (no mark: left as it is)
local dedup = dedup_key_of(dedup_space, dedup_key)
if redis.call("GET", dedup) ~= ELSEWHERE then return 0 end
redis.call("DEL", dedup)
return 1

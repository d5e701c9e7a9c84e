--- @include "keys"

-- The jobs by status, the background counters, the outbox length and the drains (bounded by
-- the statuses, the counters' names and the nodes drained). Returns {{status, count, ...},
--   stats hash (flat), outbox length, drained hash (flat)}
local by_status = {}
for _, status in ipairs(statuses) do
  by_status[#by_status + 1] = status
  by_status[#by_status + 1] = redis.call("ZCARD", K.status(status))
end
return {by_status, redis.call("HGETALL", K.stats), redis.call("LLEN", K.outbox),
  redis.call("HGETALL", K.drained_nodes)}

--- @include "keys"
--- @include "ENDED_UNITS"
--- @include "VISIT_UNITS"
--- @include "pace_of"
--- @include "settle_entry"

-- The endings whose waiters are still to settle (K.endings, settle.lua), from its head,
-- while `units` last: each waiter of an ending released or failed as the script that ended
-- the job would have (settle_waiter), the endings that fails captured and settled in turn.
-- Returns {units spent, entries left}.
local pace = pace_of(tonumber(units))
while pace.left >= VISIT_UNITS + ENDED_UNITS do
  local head = redis.call("ZRANGE", K.endings, 0, 0)[1]
  if not head then break end
  settle_entry(head, pace, now, stamp)
end
return {tonumber(units) - pace.left, redis.call("ZCARD", K.endings)}

--- @include "codes"
--- @include "keys"

-- Compare-and-set: schedule `name` becomes `new`, due at `next_tick` ("0": not due, paused or
-- no tick left), only if its record is still `old` byte for byte. A firing that lost a race
-- (another firer settled the tick, an operator paused it) changes nothing. Returns OK |
-- MISMATCH (the record changed) | NOT_FOUND.
local current = redis.call("HGET", K.schedules, name)
if not current then return NOT_FOUND end
if current ~= old then return MISMATCH end
redis.call("HSET", K.schedules, name, new)
if next_tick == "0" then
  redis.call("ZREM", K.schedules_due, name)
else
  redis.call("ZADD", K.schedules_due, next_tick, name)
end
redis.call("SADD", K.schedules_dirty, name)
return OK

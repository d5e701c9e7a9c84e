--- @include "codes"
--- @include "keys"

-- Forget schedule `name` (its jobs stay). Returns OK | NOT_FOUND.
if redis.call("HDEL", K.schedules, name) == 0 then return NOT_FOUND end
redis.call("ZREM", K.schedule_names, name)
redis.call("ZREM", K.schedules_due, name)
redis.call("SADD", K.schedules_dirty, name)
return OK

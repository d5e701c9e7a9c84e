--- @include "keys"
--- @include "schedule_pairs"

-- The schedules due at `now` (next tick <= now), the earliest first, `limit` of them after the
-- `skip` first (those a firing left due this time: no node for them). Reads only the due
-- entries of the index. Returns {name, record, name, record, ...}.
local names = redis.call("ZRANGEBYSCORE", K.schedules_due, "-inf", now, "LIMIT", skip, limit)
return schedule_pairs(names)

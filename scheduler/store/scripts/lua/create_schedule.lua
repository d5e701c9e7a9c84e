--- @include "codes"
--- @include "keys"

-- A new schedule `name`: its record, due at `next_tick` (epoch s; "0": paused). Refused while
-- the restore marker is missing (the snapshot may hold a schedule of that name), for a name
-- in use and past `max_schedules`. Returns OK | DUPLICATE | TOO_MANY | NOT_READY.
if redis.call("EXISTS", K.initialised) == 0 then return NOT_READY end
if redis.call("HEXISTS", K.schedules, name) == 1 then return DUPLICATE end
if redis.call("HLEN", K.schedules) >= tonumber(max_schedules) then return TOO_MANY end
redis.call("HSET", K.schedules, name, record)
redis.call("ZADD", K.schedule_names, 0, name)
if next_tick ~= "0" then redis.call("ZADD", K.schedules_due, next_tick, name) end
redis.call("SADD", K.schedules_dirty, name)
return OK

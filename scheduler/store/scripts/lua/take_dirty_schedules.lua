--- @include "keys"

-- Start a snapshot of the schedules: as TAKE_DIRTY for jobs, the changed names move into the
-- in-flight set (a crashed snapshot's are folded in). Returns the number in flight.
if redis.call("EXISTS", K.schedules_dirty) == 1 then
  if redis.call("EXISTS", K.schedules_dirty_inflight) == 1 then
    redis.call("SUNIONSTORE", K.schedules_dirty_inflight, K.schedules_dirty_inflight,
      K.schedules_dirty)
    redis.call("DEL", K.schedules_dirty)
  else
    redis.call("RENAME", K.schedules_dirty, K.schedules_dirty_inflight)
  end
end
return redis.call("SCARD", K.schedules_dirty_inflight)

--- @include "keys"

-- Start a snapshot: move the jobs changed since the last one into the in-flight set, which
-- keeps them until the snapshot writing them has committed. A set left by a crashed snapshot
-- is folded in, so its changes are written by this one. Returns the number in flight.
if redis.call("EXISTS", K.dirty) == 1 then
  if redis.call("EXISTS", K.dirty_inflight) == 1 then
    redis.call("SUNIONSTORE", K.dirty_inflight, K.dirty_inflight, K.dirty)
    redis.call("DEL", K.dirty)
  else
    redis.call("RENAME", K.dirty, K.dirty_inflight)
  end
end
return redis.call("SCARD", K.dirty_inflight)

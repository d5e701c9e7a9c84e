--- @include "codes"
--- @include "keys"
--- @include "sees"

-- Forget schedule `name` (its jobs stay). One outside `namespaces` (its job template's
-- namespace: read.lua sees, the caller's) is not found, and stays. Returns OK | NOT_FOUND.
if namespaces ~= "" then
  local record = redis.call("HGET", K.schedules, name)
  if not record or not sees(namespaces, cjson.decode(record).job.namespace) then
    return NOT_FOUND
  end
end
if redis.call("HDEL", K.schedules, name) == 0 then return NOT_FOUND end
redis.call("ZREM", K.schedule_names, name)
redis.call("ZREM", K.schedules_due, name)
redis.call("SADD", K.schedules_dirty, name)
return OK

--- @include "keys"

-- Put schedules back as the snapshot holds them (a schedule of the same name is replaced):
-- 3 values each, at most 1000 schedules: name, record, next tick ("0": not due). mark_dirty
-- "1": the next snapshot writes them. Returns the number restored.
for i = 1, #schedules, 3 do
  local name, next_tick = schedules[i], schedules[i + 2]
  redis.call("HSET", K.schedules, name, schedules[i + 1])
  redis.call("ZADD", K.schedule_names, 0, name)
  if next_tick == "0" then
    redis.call("ZREM", K.schedules_due, name)
  else
    redis.call("ZADD", K.schedules_due, next_tick, name)
  end
  if mark_dirty == "1" then redis.call("SADD", K.schedules_dirty, name) end
end
return #schedules / 3

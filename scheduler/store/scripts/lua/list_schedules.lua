--- @include "keys"
--- @include "schedule_pairs"

-- A page of schedules by name: `limit` of those whose name sorts after `after` ("": from the
-- first). Returns {name, record, ...}.
local from = after == "" and "-" or "(" .. after
local names = redis.call("ZRANGE", K.schedule_names, from, "+", "BYLEX", "LIMIT", 0, limit)
return schedule_pairs(names)

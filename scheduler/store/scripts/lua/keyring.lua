--- @include "keys"

-- The named keys, when they changed since `known` (the version an API process holds):
-- {version, 0} when they did not (one GET's worth of work), else {version, 1, name, record,
-- name, record, ...}.
local version = tonumber(redis.call("GET", K.api_keys_version) or "0")
if version == tonumber(known) then
  return {version, 0}
end
local found = redis.call("HGETALL", K.api_keys)
table.insert(found, 1, 1)
table.insert(found, 1, version)
return found

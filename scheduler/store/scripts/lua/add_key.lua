--- @include "next_keys_version"
--- @include "codes"
--- @include "keys"

-- A named key made (api/keys.py): its record under its name, unless the name is taken or
-- `max_keys` are held; the keys' version moves so that every API process reads them again,
-- and the audit stream says who made it. Returns {0, version}, or {1} (name taken) or
-- {2} (too many keys), or {NOT_READY} while the restore marker is missing (a Redis that lost
-- its data: the snapshot's keys are put back first, which a key made here would keep out).
if redis.call("EXISTS", K.initialised) == 0 then
  return {NOT_READY}
end
if redis.call("HEXISTS", K.api_keys, name) == 1 then
  return {1}
end
if redis.call("HLEN", K.api_keys) >= tonumber(max_keys) then
  return {2}
end
redis.call("HSET", K.api_keys, name, record)
local version = next_keys_version(at)
redis.call("XADD", K.audit, "MAXLEN", "~", audit_max, "*",
  "at", at, "by", by, "action", "key add", "name", name, "role", role)
return {0, version}

--- @include "next_keys_version"
--- @include "codes"
--- @include "keys"

-- A named key revoked (api/keys.py): its record deleted; the keys' version moves so that
-- every API process drops it, and the audit stream says who revoked it. Returns the version,
-- or 0 when no key has that name; -NOT_READY while the restore marker is missing (a Redis
-- that lost its data: the snapshot's keys are put back first, this one maybe among them).
if redis.call("EXISTS", K.initialised) == 0 then
  return -NOT_READY
end
local record = redis.call("HGET", K.api_keys, name)
if not record then
  return 0
end
redis.call("HDEL", K.api_keys, name)
local version = next_keys_version(at)
redis.call("XADD", K.audit, "MAXLEN", "~", audit_max, "*",
  "at", at, "by", by, "action", "key revoke", "name", name, "role", cjson.decode(record).role)
return version

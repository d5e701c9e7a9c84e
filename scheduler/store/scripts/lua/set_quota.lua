--- @include "codes"
--- @include "keys"
--- @include "quota_kit"

-- PUT /namespaces/{ns}/quota (api/quotas.py): namespace `namespace`'s quota (stored name: ""
-- the default's) set to `quota` (models/quota.py Quota as JSON; "": none, removed); PATCH
-- (`merge` "1"): `quota` is the change (models/quota.py QuotaChange as JSON), its limits
-- replacing those stored, a 0 removing one, the others kept, read and written here so no
-- other admin's change comes between (a quota left with no limit is removed); the
-- snapshot's count of changes moved (snapshot/quotas.py); the audit stream says who did it
-- (`by`, `at`) and what (`shown`: the namespace's name, `detail`: the limits). Jobs waiting
-- for the namespace's quota that fit under the new one are woken (admit.lua quota_kit wake).
-- Returns {OK, the quota stored ("": none)} | {NOT_READY} while the restore marker is
-- missing (a Redis that lost its data: the snapshot's quotas are put back first).
if redis.call("EXISTS", K.initialised) == 0 then return {NOT_READY} end
if merge == "1" then
  local stored = redis.call("HGET", K.quotas, namespace)
  local limits = stored and cjson.decode(stored) or {}
  for name, value in pairs(cjson.decode(quota)) do
    limits[name] = value ~= 0 and value or nil
  end
  quota = next(limits) and cjson.encode(limits) or ""
end
if quota == "" then
  redis.call("HDEL", K.quotas, namespace)
else
  redis.call("HSET", K.quotas, namespace, quota)
end
redis.call("HINCRBY", K.quotas_changes, "made", 1)
redis.call("XADD", K.audit, "MAXLEN", "~", audit_max, "*",
  "at", at, "by", by, "action", "quota set", "name", shown, "role", "", "detail", detail)
if redis.call("EXISTS", K.over_quota(namespace)) == 1 then quota_kit().wake(namespace) end
return {OK, quota}

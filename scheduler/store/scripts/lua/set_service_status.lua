--- @include "codes"
--- @include "keys"
--- @include "service_access"

-- PATCH /services/{id} (the agent, on its service's exit) or DELETE (the operator: stopped).
-- status: a plain word (models.SERVICE_STATUS_RE).
-- A node's token is checked against its node's index of services before the record is read
-- (access.lua, service_access): a stranger's token is 401 and another node's 404, for an
-- existing and a missing service alike.
-- Returns OK | NOT_FOUND | UNAUTHORIZED
local access = service_access(caller, service_id)
if access ~= OK then return access end
local service = redis.call("HGET", K.services, service_id)
if not service then return NOT_FOUND end
local updated = string.gsub(service, '"status":"[%w_%-]*"', '"status":"' .. status .. '"', 1)
redis.call("HSET", K.services, service_id, updated)
return OK

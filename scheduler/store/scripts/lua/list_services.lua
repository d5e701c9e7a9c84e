--- @include "codes"
--- @include "keys"
--- @include "node_access"

-- GET /services?node_id=&status= (either filter optional, ""), in id order. A node's list
-- reads only its own services; the operator's list without a node reads them all. caller
-- is checked when a node is named. Returns {OK, service JSON, ...} | {UNAUTHORIZED}
-- | {FORBIDDEN}
local blobs = {}
if node ~= "" then
  local access = node_access(caller, node)
  if access ~= OK then return {access} end
  local listed = redis.call("ZRANGE", K.node_services(node), 0, -1)
  if #listed > 0 then blobs = redis.call("HMGET", K.services, unpack(listed)) end
else
  local all = redis.call("HGETALL", K.services)
  local found = {}
  for i = 1, #all, 2 do found[#found + 1] = {tonumber(string.sub(all[i], 5)), all[i + 1]} end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  for _, entry in ipairs(found) do blobs[#blobs + 1] = entry[2] end
end
local out = {OK}
for _, blob in ipairs(blobs) do
  if blob and (status == "" or cjson.decode(blob).status == status) then
    out[#out + 1] = blob
  end
end
return out

--- @include "codes"
--- @include "keys"
--- @include "SERVICE_ID_PREFIX"
--- @include "draw_number"
--- @include "node_access"

-- record: the service's JSON, starting {"id":"" (the id is drawn here). A node keeps at most
-- most_per_node services: past it, its oldest one that is not running goes; `most` in all.
-- Only a registered node's (the Rust agent registers first, CONTRACT 3.2): open mode would
-- take services for any id anyone made up.
-- Returns {OK, service JSON} | {UNAUTHORIZED} | {FORBIDDEN} | {NOT_FOUND} | {TOO_MANY_NODES}
local access = node_access(caller, node)
if access ~= OK then return {access} end
if redis.call("HEXISTS", K.nodes, node) == 0 then return {NOT_FOUND} end
local own = K.node_services(node)
if redis.call("ZCARD", own) >= tonumber(most_per_node) then
  local evicted = false
  for _, old in ipairs(redis.call("ZRANGE", own, 0, -1)) do
    local kept = redis.call("HGET", K.services, old)
    if not kept or cjson.decode(kept).status ~= "running" then
      redis.call("HDEL", K.services, old)
      redis.call("ZREM", own, old)
      evicted = true
      break
    end
  end
  if not evicted then return {TOO_MANY_NODES} end
end
if redis.call("HLEN", K.services) >= tonumber(most) then return {TOO_MANY_NODES} end
local n = draw_number(K.service_seq, shards, shard, id_floor)
local id = SERVICE_ID_PREFIX .. n
local service = '{"id":"' .. id .. '"' .. string.sub(record, 9)
redis.call("HSET", K.services, id, service)
redis.call("ZADD", own, n, id)
return {OK, service}

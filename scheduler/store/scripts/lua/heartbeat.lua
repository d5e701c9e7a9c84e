--- @include "codes"
--- @include "keys"
--- @include "flag_unplaced"
--- @include "index_node"
--- @include "is_drained"
--- @include "node_access"

-- A compute node heard from again after NODE_TTL_SECS of silence (not live since
-- live_cutoff) may take the unplaced jobs (flagged); one not among the placeable nodes
-- (found dead while away, or registered by a version before placement by fit) and not
-- drained is indexed again from its record (room.lua index_node), which flags them too.
-- vouches: as REGISTER_NODE's (with no key set, every heartbeat vouches for the node). A
-- node not vouched for loses the node.hostname label an earlier version gave every node.
-- Returns {OK, node JSON, {cancelling id, ...}} | {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local record = redis.call("HGET", K.nodes, node)
if not record then return {NOT_FOUND} end
if redis.call("SISMEMBER", K.nodes_vouched, node) == 0 then
  if vouches == "1" then
    redis.call("SADD", K.nodes_vouched, node)
    index_node(node, record, record)
  else
    local hostname = cjson.decode(record).hostname
    if type(hostname) == "string" and hostname ~= "" then
      redis.call("SREM", K.label_nodes("node.hostname=" .. hostname), node)
    end
  end
end
redis.call("ZADD", K.nodes_seen, now, node)
local seen = redis.call("ZSCORE", K.nodes_compute, node)
if seen then
  redis.call("ZADD", K.nodes_compute, now, node)
  if not redis.call("ZSCORE", K.nodes_load, node) and not is_drained(node) then
    index_node(node, nil, record)  -- found dead while away, or registered before placement
  elseif tonumber(seen) < tonumber(live_cutoff) then
    flag_unplaced()
  end
end
return {OK, record, redis.call("ZRANGE", K.node_status(node, "cancelling"), 0, 99)}

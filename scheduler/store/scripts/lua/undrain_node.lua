--- @include "codes"
--- @include "keys"
--- @include "lift_drain"
--- @include "node_access"

-- POST /nodes/{id}/undrain: the node is a placement candidate again (drains.lua lift_drain:
-- the unplaced jobs are flagged for the next placement pass, and its poll hands out what
-- stayed in its queue). The key lifts any drain; a node's token only the one of
-- its own clean stop. A drain left on an id no registry lists any more (the operator's, on
-- a deleted node) can be lifted; an unknown id without one is NOT_FOUND. listed: as
-- DRAIN_NODE's.
-- Returns {OK, 1 (it was drained) | 0} | {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
--   | {FORBIDDEN, "operator"} (a node's token and the operator's drain)
local access = node_access(caller, node)
if access ~= OK then return {access} end
local held = redis.call("HGET", K.drained_nodes, node)
if not held then
  if listed ~= "1" and redis.call("HEXISTS", K.nodes, node) == 0 then return {NOT_FOUND} end
  return {OK, 0}
end
if caller ~= "key" and held ~= "stopping" then return {FORBIDDEN, held} end
lift_drain(node)
return {OK, 1}

--- @include "codes"
--- @include "keys"
--- @include "SETTLE_UNITS"
--- @include "move_off"
--- @include "node_access"
--- @include "pace_of"
--- @include "set_drain"

-- POST /nodes/{id}/drain: no job is placed on the node from now on and it starts none
-- (POLL); its jobs not running leave it through placement (drains.lua move_off, up to
-- `limit`); its running jobs finish there. by: "operator" (the key's) or "stopping" (its
-- own agent's, stopping cleanly: its next registration lifts it). An operator's drain never
-- becomes a stopping one, so the agent's restart does not undo it. caller: "key" or the
-- node's token. listed: "1" when the external registry (REGISTRY_URL) lists the node (the
-- API asked it; its jobs then leave round-robin), else the node must be the built-in
-- registry's: nothing is written for an unknown id.
-- Returns {OK, by, stayed, job id, from node, to node ("": none yet), ...} | {NOT_FOUND}
--   | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
if listed ~= "1" and redis.call("HEXISTS", K.nodes, node) == 0 then return {NOT_FOUND} end
local held = redis.call("HGET", K.drained_nodes, node)
if held ~= "operator" and held ~= by then
  set_drain(node, by)
  held = by
end
local cutoff = tonumber(now) - tonumber(node_ttl)
local moved, stayed = move_off(node, listed ~= "1", cutoff, tonumber(limit), pace_of(SETTLE_UNITS))
return {OK, held, stayed, unpack(moved)}

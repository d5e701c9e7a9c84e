--- @include "codes"
--- @include "keys"
--- @include "SETTLE_UNITS"
--- @include "forget_if_gone"
--- @include "index_node"
--- @include "lift_drain"
--- @include "live_nodes"
--- @include "move_pending"
--- @include "node_access"
--- @include "pace_of"

-- A node leaves (its agent stopping cleanly, or the operator's key): no job is placed on it
-- from now on (its labels and offer go: room.lua index_node), its token stops working at
-- once, and its pending jobs (not instance-bound) move to live nodes at once, up to `limit`
-- (one that asks a fit waits unplaced for the next placement pass). A compute node that
-- still has jobs not ended bound to it stays in nodes:compute as lost long ago (score 0),
-- so the sweep treats it as a lost node: its running jobs (none after a clean stop) and any
-- pending jobs beyond `limit` follow, and it leaves once none is left (forget_if_gone); one
-- with none leaves at once.
-- A drain of its own clean stop ends with it; an operator's stays, so the id comes back
-- drained (its agent restarting after maintenance) until the operator undrains it.
-- caller: "key" or the node's token.
-- Returns {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
--   | {OK, job id, from node, to node, ...} for each job moved.
local access = node_access(caller, node)
if access ~= OK then return {access} end
local held = redis.call("HGET", K.node_tokens, node)
if held then redis.call("HDEL", K.tokens, held) end
redis.call("HDEL", K.node_tokens, node)
local stored = redis.call("HGET", K.nodes, node)
if not stored then return {NOT_FOUND} end
redis.call("HDEL", K.nodes, node)
redis.call("ZREM", K.nodes_seen, node)
redis.call("SREM", K.nodes_vouched, node)
if redis.call("HGET", K.drained_nodes, node) == "stopping" then lift_drain(node) end
local moved = {}
if redis.call("ZSCORE", K.nodes_compute, node) then
  redis.call("ZADD", K.nodes_compute, 0, node)
  index_node(node, stored, nil)
  move_pending(node, live_nodes(live_cutoff), tonumber(limit), moved, pace_of(SETTLE_UNITS))
  forget_if_gone(node)
end
return {OK, unpack(moved)}

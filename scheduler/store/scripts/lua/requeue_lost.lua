--- @include "keys"
--- @include "SETTLE_UNITS"
--- @include "forget_if_gone"
--- @include "live_nodes"
--- @include "move_pending"
--- @include "pace_of"

-- Move the pending jobs of lost nodes (not heard from since lost_cutoff: built-in registry;
-- not seen healthy: external) to live ones (heard from since live_cutoff), round-robin,
-- keeping their place in the queue, at most `limit`. Running jobs are LOSE_RUNNING's.
-- Instance-bound jobs stay: they belong to their node. With the built-in registry
-- (`builtin` "1"), a deleted node with no job left bound to it leaves nodes:compute
-- (forget_if_gone): what a delete left for the sweep, or a deployment before this rule.
-- While one pace lasts (life.lua move_each: the caller calls again while jobs move).
-- Returns {job id, from node, to node, ...} for each job moved.
local lost = redis.call("ZRANGEBYSCORE", K.nodes_compute, "-inf", "(" .. lost_cutoff)
if #lost == 0 then return {} end
local live = live_nodes(live_cutoff)
local most, moved, pace = tonumber(limit), {}, pace_of(SETTLE_UNITS)
for _, node in ipairs(lost) do
  move_pending(node, live, most, moved, pace)
  if builtin == "1" then forget_if_gone(node) end
  if #moved >= 3 * most or pace.left <= 0 then break end
end
return moved

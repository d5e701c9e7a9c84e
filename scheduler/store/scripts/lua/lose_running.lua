--- @include "keys"
--- @include "SETTLE_UNITS"
--- @include "live_nodes"
--- @include "lose_running"
--- @include "pace_of"

-- The running jobs of lost nodes (as REQUEUE_LOST's): the agent is gone, and what it ran
-- with it: the node-loss rule (node_loss.lua, lose_running). With no live node, a job waits
-- pending on its node (REQUEUE_LOST moves it once one is). At most `limit` jobs, while one
-- pace lasts, which the endings share (the caller calls again while jobs are handled).
-- Returns {job id, from node, to node, new status, ...}.
local lost = redis.call("ZRANGEBYSCORE", K.nodes_compute, "-inf", "(" .. lost_cutoff)
if #lost == 0 then return {} end
local live = live_nodes(live_cutoff)
local most, out, pace = tonumber(limit), {}, pace_of(SETTLE_UNITS)
local policy = {max_retries, backoff, backoff_cap, seed}
for _, node in ipairs(lost) do
  lose_running(node, live, most, out, tonumber(now), stamp, policy, pace)
  if #out >= 4 * most or pace.left <= 0 then break end
end
return out

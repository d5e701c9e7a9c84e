--- @include "keys"

-- One step of a scan of the nodes (ZSCAN: a node there the whole scan is met at least once,
-- maybe twice): which "seen", every registered node (nodes:seen, with its last heartbeat);
-- "compute", the compute nodes not registered (nodes:compute: a deleted one while jobs are
-- bound to it, an external registry's sighting). Each with its pending and running jobs,
-- its run-jobs holding a slot (MAX_JOBS_PER_NODE's: running or cancelling, places.py BUSY)
-- and its services (running or cancelling: those of its jobs there holding no slot).
-- Returns {next cursor ("0": done), {id, pending, running, slots, services, last heartbeat
--   or "", ...}}
local registered = which == "seen"
local step = redis.call("ZSCAN", registered and K.nodes_seen or K.nodes_compute, cursor,
  "COUNT", count)
local rows, found = {}, step[2]
for i = 1, #found, 2 do
  local node = found[i]
  if registered or not redis.call("ZSCORE", K.nodes_seen, node) then
    rows[#rows + 1] = node
    rows[#rows + 1] = redis.call("ZCARD", K.node_status(node, "pending"))
    local running = redis.call("ZCARD", K.node_status(node, "running"))
    local slots = redis.call("SCARD", K.node_busy(node))
    rows[#rows + 1] = running
    rows[#rows + 1] = slots
    rows[#rows + 1] = running + redis.call("ZCARD", K.node_status(node, "cancelling")) - slots
    rows[#rows + 1] = registered and found[i + 1] or ""
  end
end
return {step[1], rows}

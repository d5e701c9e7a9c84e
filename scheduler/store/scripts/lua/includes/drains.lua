--- @include "keys"
--- @include "flag_unplaced"
--- @include "is_drained"
--- @include "live_nodes"
--- @include "move_each"
--- @include "next_live"
--- @include "place"
--- @include "rebind"
--- @include "refresh_load"
--- @include "serves"
--- @include "wake_node"

-- Drains (docs/GUIDE.md, Drain): a node in {P}:nodes:drained, by "operator" (the key's, for
-- maintenance) or "stopping" (its own agent's clean stop, which its next registration lifts),
-- is never a placement candidate (room.lua is_drained) and starts nothing new (POLL). Every
-- change is counted, so the snapshot writes the hash only when it changed (snapshot/drains.py).
-- Its jobs not running, and a retry of one that ran there, leave it through placement.

local function set_drain(node, by)
  redis.call("HSET", K.drained_nodes, node, by)
  redis.call("HINCRBY", K.drained_changes, "made", 1)
  refresh_load(node)  -- out of the placeable nodes
end

-- A candidate again: among the placeable nodes, the unplaced jobs flagged for the next pass
-- (it may fit them), its poll woken (what stayed in its queue starts again).
local function lift_drain(node)
  if redis.call("HDEL", K.drained_nodes, node) == 1 then
    redis.call("HINCRBY", K.drained_changes, "made", 1)
    refresh_load(node)
    flag_unplaced()
    wake_node(node)
  end
end

-- Where a job leaving a drained node goes (not bound yet): with the built-in registry
-- (`builtin`) to placement, i.e. to no node yet (""), placed as an unplaced job is (a
-- pending one by the next PLACE_UNPLACED pass, a delayed one when due, a waiting one when
-- its wait ends: place.lua place); an external registry's nodes carry no room nor load, so
-- the next live one, round-robin, or nil (none: it stays).
local function off_drained(builtin, cutoff)
  if builtin then return "" end
  return next_live(live_nodes(cutoff))
end

local OFF_STATUSES = {"pending", "waiting", "delayed"}

-- DRAIN_NODE's move: the drained node's jobs not running and not instance-bound leave it
-- (off_drained; a pending one is placed at once, so the answer says where: place), keeping
-- their status, in queue order, up to `limit` or `pace` (life.lua move_each): {id, from,
-- to ("": none yet), ...}, and how many stayed bound to it (instance-bound, past `limit` or
-- `pace`, or no live node of an external registry: a drain again moves them).
local function move_off(node, builtin, cutoff, limit, pace)
  local moved, stayed, failed = {}, 0, {}
  for _, status in ipairs(OFF_STATUSES) do
    move_each(node, status, limit, moved, function(id, n, job)
      if builtin and status == "pending" then
        return place(id, n, job, cutoff, failed) or ""  -- an ask none took: read once
      end
      local to = off_drained(builtin, cutoff)
      if to then rebind(id, n, job, status, to) end
      return to
    end, pace)
    if pace.left <= 0 then break end
  end
  for _, status in ipairs(OFF_STATUSES) do
    stayed = stayed + redis.call("ZCARD", K.node_status(node, status))
  end
  return moved, stayed
end

-- The node a job tried again goes to (a failed report; a timeout under its own policy): its
-- own, unless that is drained or no longer serves the job's namespace (labelled anew while
-- it ran: room.lua serves); then off_drained (placed by the next pass, about a tick later: a
-- report's script carries none of find_node's Lua), its own still when an external registry
-- has no live node, or when it is bound to an instance there.
local function retry_node(job, builtin, cutoff)
  local node = job.node_id
  if (job.instance_id or "") ~= "" then return node end
  if not is_drained(node) and serves(node, job.namespace) then return node end
  return off_drained(builtin, cutoff) or node
end

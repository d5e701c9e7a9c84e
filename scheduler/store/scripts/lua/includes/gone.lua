--- @include "keys"
--- @include "UNFINISHED"

-- A compute node deleted from the built-in registry stays in nodes:compute, as lost long ago,
-- only while jobs not ended are bound to it, for the node-loss rule to find them (LOSE_RUNNING,
-- REQUEUE_LOST; a waiting or delayed job becomes pending on its node later). Then it leaves,
-- so placement, the UI, /metrics and the sweep know only the nodes that exist.

local function forget_if_gone(node)
  if redis.call("HEXISTS", K.nodes, node) == 1 then return end
  for _, status in ipairs(UNFINISHED) do
    if redis.call("EXISTS", K.node_status(node, status)) == 1 then return end
  end
  redis.call("ZREM", K.nodes_compute, node)
  redis.call("DEL", K.node_room(node), K.node_held(node))
end

--- @include "keys"

-- The upgrade to the services counted in each node's room hash (places.py SERVICES; until
-- issue 40 a set of each node's busy run-jobs, and one of the jobs it held): `counted` is
-- pairs of a node and its service jobs running or cancelling (ops.upkeep.count_services read
-- them), each set, 0 dropped; each node's two sets of the release before deleted; marked
-- done. Returns the number of nodes written.
for i = 1, #counted, 2 do
  local node, count = counted[i], counted[i + 1]
  if count == "0" then
    redis.call("HDEL", K.node_room(node), "services")
  else
    redis.call("HSET", K.node_room(node), "services", count)
  end
  redis.call("DEL", K.node_busy(node), K.node_held(node))
end
redis.call("SET", K.services_counted, "1")
return #counted / 2

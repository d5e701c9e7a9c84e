--- @include "codes"
--- @include "pick_node"

-- GET /schedule: the node the next job that asks nothing would go to (the ticket advances,
-- as the original's).
-- Returns {OK, node id} | {NO_NODES}
local node = pick_node(mode, candidates, {}, tonumber(now) - tonumber(node_ttl))
if not node then return {NO_NODES} end
return {OK, node}

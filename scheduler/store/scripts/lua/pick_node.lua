--- @include "codes"
--- @include "any_ticket"
--- @include "pick_node"

-- GET /schedule: a node the next job that asks nothing may go to (one of the least loaded,
-- any of their ties; with an external registry the round-robin ticket advances, as the
-- original's).
-- Returns {OK, node id} | {NO_NODES}
local node = pick_node(mode, candidates, {}, tonumber(now) - tonumber(node_ttl), any_ticket())
if not node then return {NO_NODES} end
return {OK, node}

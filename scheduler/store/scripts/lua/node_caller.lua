--- @include "node_access"

-- Whether `caller` may make node `node`'s own calls (GET /instances in token mode): the key,
-- or the node's token. Returns OK | UNAUTHORIZED | FORBIDDEN.
return node_access(caller, node)

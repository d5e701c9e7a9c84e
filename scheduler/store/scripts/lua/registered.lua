--- @include "keys"

-- Whether a registry lists the node: the built-in one's nodes (builtin "1"), or the compute
-- nodes the sweep saw in REGISTRY_URL's (nodes:compute). Returns 1 | 0
if builtin == "1" then return redis.call("HEXISTS", K.nodes, node) end
return redis.call("ZSCORE", K.nodes_compute, node) and 1 or 0

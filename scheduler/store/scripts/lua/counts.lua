--- @include "keys"

-- The web UI's jobs page: how many jobs each status holds, of one node or of all, and how
-- many in all. Returns {all, count of each of `statuses`, ...}
local out = {redis.call("ZCARD", node == "" and K.all_jobs or K.node_jobs(node))}
for _, status in ipairs(statuses) do
  local index = node == "" and K.status(status) or K.node_status(node, status)
  out[#out + 1] = redis.call("ZCARD", index)
end
return out

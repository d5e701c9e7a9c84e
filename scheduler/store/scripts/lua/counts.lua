--- @include "keys"
--- @include "namespaces_in"

-- The web UI's jobs page: how many jobs each status holds, of one node or of all, and how
-- many in all; with a `scope` (listing.lua namespaces_in), of those namespaces (summed; the
-- API takes no node with one). Returns {all, count of each of `statuses`, ...}
local namespaces = namespaces_in(scope)
local function count(status)
  if not namespaces then
    if status == "" then
      return redis.call("ZCARD", node == "" and K.all_jobs or K.node_jobs(node))
    end
    return redis.call("ZCARD", node == "" and K.status(status) or K.node_status(node, status))
  end
  local n = 0
  for _, ns in ipairs(namespaces) do
    local index = status == "" and K.namespace_jobs(ns) or K.namespace_status(ns, status)
    n = n + redis.call("ZCARD", index)
  end
  return n
end
local out = {count("")}
for _, status in ipairs(statuses) do out[#out + 1] = count(status) end
return out

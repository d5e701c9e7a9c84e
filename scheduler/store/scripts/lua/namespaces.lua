--- @include "keys"
--- @include "ns_in_use"
--- @include "ns_pending"

-- GET /namespaces (api/quotas.py): the default namespace, each with a quota and each that
-- holds jobs (K.namespaces), by stored name: {name, quota JSON ("": none), running, pending
-- (pending, delayed or waiting), cpus, memory_mb, waiting for quota, ...}. Reads a few
-- counts per namespace: no job is read.
local names, seen = {""}, {[""] = true}
local function add(name)
  if not seen[name] then
    seen[name] = true
    names[#names + 1] = name
  end
end
for _, name in ipairs(redis.call("HKEYS", K.quotas)) do add(name) end
for _, name in ipairs(redis.call("SMEMBERS", K.namespaces)) do add(name) end
local out = {}
for _, name in ipairs(names) do
  local use = ns_in_use(name)
  local pending = ns_pending(name)
  out[#out + 1] = name
  out[#out + 1] = redis.call("HGET", K.quotas, name) or ""
  out[#out + 1] = use.running
  out[#out + 1] = pending
  out[#out + 1] = use.cpus
  out[#out + 1] = use.memory_mb
  out[#out + 1] = redis.call("ZCARD", K.over_quota(name))
end
return out

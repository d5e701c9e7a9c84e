--- @include "keys"
--- @include "load_job"
--- @include "number_of"

-- The upgrade to namespaces (ops.upkeep.index_namespaces): jobs an earlier version made are
-- in no namespace's index (places.py BY_NAMESPACE, NAMESPACE_STATUS); each of `ids` is put in
-- its namespace's ("" for a record naming none: the default's) by number, and in that
-- namespace's index of its status, and its namespace counted in use. Idempotent: a job there
-- already stays as it is. Returns how many of `ids` were found.
local found = 0
for _, id in ipairs(cjson.decode(ids)) do
  local job = load_job(id)
  if job then
    local ns, n = job.namespace or "", number_of(id)
    redis.call("ZADD", K.namespace_jobs(ns), n, id)
    redis.call("ZADD", K.namespace_status(ns, job.status), n, id)
    redis.call("SADD", K.namespaces, ns)
    found = found + 1
  end
end
return found

--- @include "keys"
--- @include "enter_namespace"
--- @include "load_job"
--- @include "number_of"

-- The upgrade to namespaces (ops.upkeep.index_namespaces): jobs an earlier version made are
-- in no namespace's index (places.py BY_NAMESPACE, NAMESPACE_STATUS); each of `ids` is put in
-- those of its place (a record naming none: the default's), and its namespace counted in
-- use. Idempotent: a job there already stays as it is. Returns how many of `ids` were found.
local found = 0
for _, id in ipairs(cjson.decode(ids)) do
  local job = load_job(id)
  if job then
    enter_namespace(id, number_of(id), job)
    redis.call("SADD", K.namespaces, job.namespace or "")
    found = found + 1
  end
end
return found

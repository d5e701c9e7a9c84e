--- @include "keys"
--- @include "enter_namespace"
--- @include "load_job"
--- @include "number_of"
--- @include "ns_use"
--- @include "RUNS"

-- The upgrade to namespaces (ops.upkeep.index_namespaces): jobs an earlier version made are
-- in no namespace's index (places.py BY_NAMESPACE, NAMESPACE_STATUS); each of `ids` is put in
-- those of its place (a record naming none: the default's), and its namespace counted in
-- use; one running (or cancelling) adds its asks to its namespace's sums (quota.lua ns_use).
-- Idempotent: a job there already stays as it is. Returns how many of `ids` were found.
local found = 0
for _, id in ipairs(cjson.decode(ids)) do
  local job = load_job(id)
  if job then
    -- Not indexed yet: a job that ran before quotas kept their sums counts in them now (one
    -- indexed already, moved since, was counted by its move).
    local fresh = not redis.call("ZSCORE", K.namespace_status(job.namespace or "", job.status), id)
    enter_namespace(id, number_of(id), job)
    if fresh and RUNS[job.status] then ns_use(job) end
    -- in use (keys_teams.py namespaces: the default's is always counted)
    if (job.namespace or "") ~= "" then redis.call("SADD", K.namespaces, job.namespace) end
    found = found + 1
  end
end
return found

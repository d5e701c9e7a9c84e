--- @include "codes"
--- @include "keys"
--- @include "ELSEWHERE"
--- @include "REASON"
--- @include "count_minute"
--- @include "crowded_dependency"
--- @include "dedup_key_of"
--- @include "draw_number"
--- @include "encode"
--- @include "enter_place"
--- @include "finish"
--- @include "load_job"
--- @include "needs_fit"
--- @include "note_event"
--- @include "pick_node"
--- @include "quota_refusal"
--- @include "set_output"
--- @include "wait_for"
--- @include "wake_node"

-- A new job that runs after others (fragments/new_job.lua says what else it takes): after,
-- the jobs it runs after (JSON): `waiting` until they are done; failed at once
-- (dependency_failed) if one has failed. A job runs after jobs of its own namespace only,
-- whoever submits it: one of another namespace is answered as one that does not exist
-- (UNKNOWN_AFTER), so a key learns nothing of a namespace it is not limited to.
-- Returns {OK, head} | {DUPLICATE, the head of the job made ("": gone)} | {MISMATCH}
--   | {NOT_STAGED} (the staged spec is gone)
--   | {OVER_QUOTA, namespace, what, its limit, the count} (quota.lua quota_refusal)
--   | {NO_NODES} | {NOT_READY} | {UNKNOWN_AFTER, id}
--   | {TOO_MANY, id waited for by max_waiters already}
--- @insert "new_job"
-- Whether the new job may run after job `dep`: one in its own namespace's index. A job made
-- before namespaces were indexed is in none: a default one (its record names no namespace),
-- its record read only then.
local function same_namespace(dep)
  if redis.call("ZSCORE", K.namespace_jobs(namespace), dep) then return true end
  if namespace ~= "" or not redis.call("ZSCORE", K.all_jobs, dep) then return false end
  local found = load_job(dep)
  return found ~= nil and (found.namespace or "") == ""
end
local deps = cjson.decode(after)
for _, dep in ipairs(deps) do
  if not same_namespace(dep) then return unmade({UNKNOWN_AFTER, dep}) end
end
local crowded = crowded_dependency(deps, max_waiters)
if crowded then return unmade({TOO_MANY, crowded}) end
--- @insert "new_job_placed"
local waits, failed = wait_for(id, deps)
local status = "pending"
if waits > 0 or failed then
  status = "waiting"
  local decoded = cjson.decode(job)
  decoded.status, decoded.pending_reason = "waiting", nil
  if needs_fit(ask) then node, decoded.node_id = "", "" end  -- placed once its wait ends
  job = encode(decoded)
end
--- @insert "store_new"
if failed then
  local decoded = cjson.decode(job)
  set_output(id, decoded, "stderr", "dependency " .. failed .. " ended failed")
  return {OK, finish(id, n, decoded, "dependency_failed", now, stamp)}
end
return {OK, job}

--- @include "codes"
--- @include "keys"
--- @include "QUOTA_WAITS"
--- @include "load_job"
--- @include "sees"

-- The job page's (ui_job.py) place of a pending job in the queue it waits in: its node's
-- (places.py: by priority, then number; the poll takes from the front), or, on no node yet,
-- its namespace's jobs waiting for quota, or the jobs waiting for placement. Never the
-- agent's path: GET /jobs/{id} reads the record alone.
-- Returns {OK, jobs ahead of it, jobs in that queue} | {OK} (in no queue: not pending, or
-- not in it) | {NOT_FOUND} (also for a job outside `namespaces`: read.lua sees)
local job = load_job(job_id)
if not job or not sees(namespaces, job.namespace) then return {NOT_FOUND} end
if job.status ~= "pending" then return {OK} end
local queue = K.unplaced
if job.node_id ~= "" then
  queue = K.node_status(job.node_id, "pending")
elseif QUOTA_WAITS[job.pending_reason] then
  queue = K.over_quota(job.namespace or "")
end
local ahead = redis.call("ZRANK", queue, job_id)
if not ahead then return {OK} end
return {OK, ahead, redis.call("ZCARD", queue)}

--- @include "codes"
--- @include "CARRIED"
--- @include "after_an_attempt"
--- @include "FINAL"
--- @include "NOT_STARTED"
--- @include "finish"
--- @include "load_job"
--- @include "move_job"
--- @include "number_of"
--- @include "sees"
--- @include "store_job"
--- @include "wake_job"
--- @include "wake_node"

-- DELETE /jobs/{id}, by the key named `by` ("" without keys: its cancelled_by). A pending
-- or delayed job is cancelled at once (it ends failed, failure_reason cancelled: settle.lua
-- finish). A running one becomes cancelling: it keeps
-- its node's slot, its timeout no longer applies, and its agent learns it (the poll's
-- X-Cancel-Jobs, the heartbeat's answer), kills it and reports cancelled; an agent that
-- cannot be told (the original) gets 409 on its late report, and the sweep cancels the job
-- CANCEL_GRACE_SECS later (FINISH_CANCELS).
-- A job outside `namespaces` (read.lua sees: its caller's) is not found, and stays as it is.
-- Returns {OK, the job's head} (a cancelling job: as it is) | {NOT_FOUND} | {FINISHED}
local job, raw = load_job(job_id)
if not job or not sees(namespaces, job.namespace) then return {NOT_FOUND} end
if FINAL[job.status] then return {FINISHED} end
if job.status == "cancelling" then return {OK, raw} end
if by ~= "" then job.cancelled_by = by end
local n = number_of(job_id)
if NOT_STARTED[job.status] then
  -- An attempt that never ran has no output of its own: a stderr the record kept from an
  -- earlier one (transition.lua) stays out of its entry.
  if after_an_attempt(job) then job[CARRIED] = "stderr" end
  return {OK, finish(job_id, n, job, "cancelled", now, stamp)}
end
move_job(job_id, n, job, "cancelling", job.node_id, now)  -- keeps its slot, not its deadline
wake_node(job.node_id)
wake_job(job_id)
return {OK, store_job(job_id, job)}

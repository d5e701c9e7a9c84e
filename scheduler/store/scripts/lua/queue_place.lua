--- @include "codes"
--- @include "load_job"
--- @include "queue_of"
--- @include "sees"

-- The place of a pending job in the queue it waits in (places.py: its node's, the jobs
-- waiting for placement, or its namespace's waiting for quota; generated queue_of), for the
-- job page (ui_job.py), GET /jobs/{id}/place and `scheduler status`. Never the agent's
-- path: GET /jobs/{id} reads the record alone.
-- Returns {OK, jobs ahead of it, jobs in that queue} | {OK} (in no queue: not pending, or
-- not in it) | {NOT_FOUND} (also for a job outside `namespaces`: read.lua sees)
local job = load_job(job_id)
if not job or not sees(namespaces, job.namespace) then return {NOT_FOUND} end
local queue = queue_of(job)
local ahead = queue and redis.call("ZRANK", queue, job_id)
if not ahead then return {OK} end
return {OK, ahead, redis.call("ZCARD", queue)}

--- @include "codes"
--- @include "keys"
--- @include "load_job"
--- @include "sees"

-- GET /jobs/{id}/attempts: the job's ended attempts, oldest first, as attempts.lua's
-- record_attempt wrote them (the last ATTEMPTS_KEPT). Returns {OK, attempt JSON, ...}
--   | {NOT_FOUND} (also for a job outside `namespaces`: read.lua sees, its caller's; the
--   record is read only for a caller limited to some)
if namespaces == "" then
  if redis.call("EXISTS", K.job(job_id)) == 0 then return {NOT_FOUND} end
else
  local job = load_job(job_id)
  if not job or not sees(namespaces, job.namespace) then return {NOT_FOUND} end
end
local out = redis.call("LRANGE", K.attempts(job_id), 0, -1)
table.insert(out, 1, OK)
return out

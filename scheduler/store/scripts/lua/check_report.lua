--- @include "codes"
--- @include "keys"
--- @include "job_access"

-- Before the body of an agent's report is read (PATCH /jobs/{id} with a large or unsized
-- body, or in token mode): this caller may report on the job, which exists; neither reads
-- the record (access.lua job_access). TRANSITION checks again.
-- Returns OK | NOT_FOUND | NOT_READY (as TRANSITION's) | UNAUTHORIZED
if caller == "open" or caller == "key" then
  if redis.call("EXISTS", K.job(job_id)) == 1 then return OK end
  return redis.call("EXISTS", K.initialised) == 0 and NOT_READY or NOT_FOUND
end
return (job_access(caller, job_id))

--- @include "codes"
--- @include "keys"

-- GET /jobs/{id}/attempts: the job's ended attempts, oldest first, as attempts.lua's
-- record_attempt wrote them (the last ATTEMPTS_KEPT). Returns {OK, attempt JSON, ...}
--   | {NOT_FOUND}
if redis.call("EXISTS", K.job(job_id)) == 0 then return {NOT_FOUND} end
local out = redis.call("LRANGE", K.attempts(job_id), 0, -1)
table.insert(out, 1, OK)
return out

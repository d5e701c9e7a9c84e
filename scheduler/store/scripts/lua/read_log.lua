--- @include "codes"
--- @include "keys"
--- @include "attempt_of"
--- @include "load_job"
--- @include "sees"

-- GET /jobs/{id}/logs: the job's live output after entry `after` ("-": from the first), at
-- most `budget` bytes of text (at least one entry), with what a reader needs to go on: the
-- job's status and exit code (a follower stops once it ended), its attempt now, the bytes
-- dropped from the log's start. Returns {OK, status, exit code ("" none), attempt, dropped,
-- more (1: the budget left entries after these), id, stream (o|e), attempt, bytes written
-- before it, text, ...}
--   | {NOT_FOUND} (also for a job outside `namespaces`: read.lua sees, its caller's)
local job = load_job(job_id)
if not job or not sees(namespaces, job.namespace) then return {NOT_FOUND} end
local state = K.job_log_state(job_id)
local out = {OK, job.status, type(job.exit_code) == "number" and tostring(job.exit_code) or "",
  attempt_of(job), redis.call("HGET", state, "dropped") or "0", 0}
local start, size = after == "-" and "-" or "(" .. after, 0
while true do
  local entries = redis.call("XRANGE", K.job_log(job_id), start, "+", "COUNT", 50)
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    if size > 0 and size + #fields[8] > tonumber(budget) then
      out[6] = 1
      return out
    end
    size = size + #fields[8]
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4], out[#out + 5] =
      entry[1], fields[2], fields[4], fields[6], fields[8]
    start = "(" .. entry[1]
  end
  if #entries < 50 then return out end
end

--- @include "keys"
--- @include "ATTEMPTS_KEPT"
--- @include "ATTEMPT_TAIL_BYTES"
--- @include "is_apart"

-- An attempt's end, kept apart from the record (models/attempt.py says what, and why): one
-- JSON entry pushed on the job's attempts list, which keeps the last ATTEMPTS_KEPT. Called
-- by finish and requeue only, before they change the job: its status says whether the
-- attempt ran (running or cancelling: started at running_at; pending or delayed: never).

-- The last ATTEMPT_TAIL_BYTES of the job's output `name` (stdout, stderr), from a character's
-- first byte (valid UTF-8 stays so). One stored apart (models/record.py) is read with
-- GETRANGE: the cost is the tail's, not the output's.
local function output_tail(id, job, name)
  local text = job[name] or ""
  if is_apart(job, name) then
    local key = K.job_output(id, name)
    local size = redis.call("STRLEN", key)
    text = redis.call("GETRANGE", key, math.max(0, size - ATTEMPT_TAIL_BYTES), -1)
    if size <= ATTEMPT_TAIL_BYTES then return text end
  elseif #text > ATTEMPT_TAIL_BYTES then
    text = string.sub(text, #text - ATTEMPT_TAIL_BYTES + 1)
  else
    return text
  end
  local first = 1
  while first < #text do
    local byte = string.byte(text, first)
    if byte < 128 or byte >= 192 then break end
    first = first + 1
  end
  return string.sub(text, first)
end

-- A field a report sets on the job it ends, never stored: the output (its name) the record
-- kept from an earlier attempt, which this attempt did not send (transition.lua).
local CARRIED = "_carried"

-- Whether the job's record may hold an earlier attempt's stderr: it was retried, or it is a
-- service placed again after its node was lost ("node lost", its retry_count unchanged:
-- node_loss.lua).
local function after_an_attempt(job)
  return (job.retry_count or 0) > 0 or job.job_type == "service"
end

-- The number of the job's attempt, running or last ended, over its whole life: a retry by
-- hand starts retry_count over, not the numbering (models/job.py attempt_of).
local function attempt_of(job)
  return (job.earlier_attempts or 0) + (job.retry_count or 0) + 1
end

local function record_attempt(id, job, reason, stamp)
  local carried = job[CARRIED]
  job[CARRIED] = nil
  local out = {'{"attempt":' .. attempt_of(job),
    '"node_id":' .. cjson.encode(job.node_id)}
  local ran = job.status == "running" or job.status == "cancelling"
  if ran and type(job.running_at) == "string" then
    out[#out + 1] = '"started_at":' .. cjson.encode(job.running_at)
  end
  out[#out + 1] = '"ended_at":' .. cjson.encode(stamp)
  if type(job.exit_code) == "number" then
    out[#out + 1] = '"exit_code":' .. cjson.encode(job.exit_code)
  end
  out[#out + 1] = '"reason":' .. cjson.encode(reason)
  for _, name in ipairs({"stdout", "stderr"}) do
    local text = name ~= carried and output_tail(id, job, name) or ""
    if text ~= "" then
      out[#out + 1] = '"' .. name .. '":' .. cjson.encode(text)
    end
  end
  local key = K.attempts(id)
  local entry = table.concat(out, ",") .. "}"
  -- cjson writes "/" as "\/": the entry is read as the API writes JSON (a plain find first:
  -- a gsub costs a report more than its RPUSH)
  if string.find(entry, "\\/", 1, true) then entry = string.gsub(entry, "\\/", "/") end
  local kept = redis.call("RPUSH", key, entry)
  if kept > ATTEMPTS_KEPT then redis.call("LTRIM", key, -ATTEMPTS_KEPT, -1) end
end

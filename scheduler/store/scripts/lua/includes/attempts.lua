--- @include "keys"
--- @include "ATTEMPTS_KEPT"
--- @include "ATTEMPT_TAIL_BYTES"
--- @include "OUTPUTS"
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

-- Small whole numbers as JSON, made once (formatting a Lua number costs ~2 300
-- instructions): an attempt's number, an exit code.
local SMALL_NUMBERS = {}
for i = -1, 255 do SMALL_NUMBERS[i] = i .. "" end  -- (no tostring when loaded)

-- `value` as a JSON string: cjson's, with its "\/" for a slash undone (as models/attempt.py
-- and the wire write it).
local function json_text(value)
  local out = cjson.encode(value)
  if string.find(value, "/", 1, true) then out = string.gsub(out, "\\/", "/") end
  return out
end

-- (The node id, stamp and reason need no escaping: ids are checked at registration, the
-- stamp is the API's RFC 3339, the reason an ending's name.)
local function record_attempt(id, job, reason, stamp)
  local attempt = (job.retry_count or 0) + 1
  local out = {'{"attempt":' .. (SMALL_NUMBERS[attempt] or attempt),
    '"node_id":"' .. (job.node_id or "") .. '"'}
  local ran = job.status == "running" or job.status == "cancelling"
  if ran and type(job.running_at) == "string" then
    out[#out + 1] = '"started_at":' .. json_text(job.running_at)
  end
  out[#out + 1] = '"ended_at":"' .. stamp .. '"'
  local code = job.exit_code
  if type(code) == "number" then
    out[#out + 1] = '"exit_code":' .. (SMALL_NUMBERS[code] or cjson.encode(code))
  end
  out[#out + 1] = '"reason":"' .. reason .. '"'
  for _, name in ipairs(OUTPUTS) do
    local text = output_tail(id, job, name)
    if text ~= "" then out[#out + 1] = '"' .. name .. '":' .. json_text(text) end
  end
  local key = K.attempts(id)
  local kept = redis.call("RPUSH", key, table.concat(out, ",") .. "}")
  if kept > ATTEMPTS_KEPT then redis.call("LTRIM", key, -ATTEMPTS_KEPT, -1) end
end

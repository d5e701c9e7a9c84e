--- @include "keys"
--- @include "APART"
--- @include "OUTPUTS"

-- The parts of a job's record (models/record.py): kept in its head while small, stored apart
-- (named in the head's APART, `_parts`) while large; a large one reaches its key staged (the API
-- SETs it, a script renames it), so its bytes never enter a script.

-- The keys of a job's record, as models/record.assemble reads them (store/records.py).
local function part_keys(id, keys)
  keys[#keys + 1] = K.job(id)
  keys[#keys + 1] = K.job_spec(id)
  for _, stream in ipairs(OUTPUTS) do keys[#keys + 1] = K.job_output(id, stream) end
end

local function is_apart(job, name)
  return type(job[APART]) == "table" and job[APART][name] ~= nil
end

-- `name` marked apart with its digest (nil: not apart).
local function mark_apart(job, name, digest)
  local parts = type(job[APART]) == "table" and job[APART] or {}
  parts[name] = digest
  job[APART] = next(parts) ~= nil and parts or nil
end

-- The job's output `name` (stdout, stderr) set to `text`, kept in its head (nil or "": none).
local function set_output(id, job, name, text)
  if is_apart(job, name) then
    redis.call("DEL", K.job_output(id, name))
    mark_apart(job, name, nil)
  end
  job[name] = text ~= "" and text or nil
end

-- The job's output `name` from the staged key `token` (a large one, whose SHA-1 is
-- `digest`), renamed into its key.
local function adopt_output(id, job, name, token, digest)
  local key = K.job_output(id, name)
  redis.call("RENAME", K.staged(token), key)
  redis.call("PERSIST", key)
  job[name] = nil
  mark_apart(job, name, digest)
end

-- Whether the job's output `name` is the one a report sends (`text`, or a large one staged
-- with this `digest`: a repeated report's check). Small and large ones never match
-- (models/record.py puts each by its size); large ones are compared by their digests.
local function output_is(job, name, text, digest)
  if digest == "" then return not is_apart(job, name) and (job[name] or "") == text end
  return is_apart(job, name) and job[APART][name] == digest
end

"""The job record in Lua (`ENCODE`: docs/ARCHITECTURE.md, Records), its parts kept apart
(`PARTS`: models/record.py), and wire.rfc3339 (`TIME`). Part of the scripts' library
(library.py), which gives each script the definitions it uses."""

from scheduler.models.fields import Kind
from scheduler.models.job import JOB_FIELDS
from scheduler.models.record import APART, OUTPUT_FIELDS

# A record's head (models/record.py) as a script writes it: cjson.encode of the decoded
# table, in hash order, "/" escaped as "\\/". Its readers put every record into the wire's
# order and form in the API (models/record.py assemble), so Redis does not: writing one field
# by field in Go's order cost a script ~110 000 instructions a record, a third of a report's
# (benchmarks/script_instructions.py). A list field emptied in Lua must go, as cjson writes an
# empty table as an object. The command goes first, where the UI's search reads it without
# decoding the record (listing.py SEARCH).
ENCODE = (
    "local LIST_FIELDS = {"
    + ", ".join(f'"{field.name}"' for field in JOB_FIELDS if field.kind is Kind.LIST)
    + """}

local function encode(job)
  for i = 1, #LIST_FIELDS do
    local value = job[LIST_FIELDS[i]]
    if type(value) == "table" and next(value) == nil then job[LIST_FIELDS[i]] = nil end
  end
  local command = job.command
  if command == nil then return cjson.encode(job) end
  job.command = nil
  local rest = cjson.encode(job)
  job.command = command
  local tail = rest == "{}" and "}" or "," .. string.sub(rest, 2)
  return '{"command":' .. cjson.encode(command) .. tail
end
"""
)

# wire.rfc3339 in Lua, for a time a script computes (a retry's run_at): epoch seconds as UTC
# with microseconds (the civil date from days since 1970: Howard Hinnant's algorithm).
TIME = """
local function rfc3339(epoch)
  local micros = math.floor(epoch * 1000000 + 0.5)
  local secs = math.floor(micros / 1000000)
  micros = micros - secs * 1000000
  local days = math.floor(secs / 86400)
  local rest = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", year, month, day,
    math.floor(rest / 3600), math.floor(rest % 3600 / 60), rest % 60, micros)
end
"""


# The parts of a job's record (models/record.py): kept in its head while small, stored apart
# (named in the head's APART, `_parts`) while large; a large one reaches its key staged (the API
# SETs it, a script renames it), so its bytes never enter a script.
PARTS = (
    f'local APART = "{APART}"\n'
    + "local OUTPUTS = {"
    + ", ".join(f'"{name}"' for name in OUTPUT_FIELDS)
    + """}

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
"""
)

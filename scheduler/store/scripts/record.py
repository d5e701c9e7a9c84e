"""The job record in Lua, as Go's encoder wrote it (`ENCODE`: docs/ARCHITECTURE.md,
Records), its parts kept apart (`PARTS`: models/record.py), and wire.rfc3339 (`TIME`). Part
of the scripts' library (library.py), which gives each script the definitions it uses."""

from scheduler.models.fields import Kind
from scheduler.models.job import JOB_FIELDS
from scheduler.models.record import OUTPUT_FIELDS


def _record_fields() -> str:
    """The Lua table of Job's fields in Go's order, each with its omission rule: "always"
    (no default), "null" (omitted only when absent: exit_code 0 is written) or "empty"."""
    rows = []
    for field in JOB_FIELDS:
        rule = "always" if field.required else "null" if field.nullable else "empty"
        shape = "list" if field.kind is Kind.LIST else "value"
        rows.append(f'{{"{field.name}", "{rule}", "{shape}"}}')
    return "{" + ", ".join(rows) + "}"


# A record's head (models/record.py) written field by field, as Go's encoder wrote a job:
# struct fields in Job's order, empty optional ones omitted, map keys sorted.
# cjson.encode(table) would write them in hash order, so the bytes of a job would change
# with every script that touched it. Fields a head holds beyond Job's (kept from a newer
# version through a restore; `_parts`, the parts stored apart: models/record.py) follow,
# sorted.
# cjson escapes "/" as "\\/"; Go does not, and since cjson escapes every "/", undoing it is
# exact.
ENCODE = f"""
local RECORD_FIELDS = {_record_fields()}
local RECORD_KNOWN = {{}}
-- Not ipairs: a function library runs this when loaded, where Lua's globals are not set.
for i = 1, #RECORD_FIELDS do RECORD_KNOWN[RECORD_FIELDS[i][1]] = true end

local function encode_sorted(map)
  local names, out = {{}}, {{}}
  for name in pairs(map) do names[#names + 1] = name end
  table.sort(names)
  for i, name in ipairs(names) do
    out[i] = cjson.encode(name) .. ":" .. cjson.encode(map[name])
  end
  return "{{" .. table.concat(out, ",") .. "}}"
end

local function omitted(value, rule)
  if value == nil or value == cjson.null then return rule ~= "always" end
  if rule ~= "empty" then return false end
  if type(value) == "table" then return next(value) == nil end
  return value == "" or value == 0
end

local function encode(job)
  local out = {{}}
  for _, field in ipairs(RECORD_FIELDS) do
    local name, value = field[1], job[field[1]]
    if not omitted(value, field[2]) then
      local text = (type(value) ~= "table" or field[3] == "list") and cjson.encode(value)
        or encode_sorted(value)
      out[#out + 1] = '"' .. name .. '":' .. text
    end
  end
  local extra = {{}}
  for name in pairs(job) do
    if not RECORD_KNOWN[name] then extra[#extra + 1] = name end
  end
  table.sort(extra)
  for _, name in ipairs(extra) do
    out[#out + 1] = cjson.encode(name) .. ":" .. cjson.encode(job[name])
  end
  return (string.gsub("{{" .. table.concat(out, ",") .. "}}", "\\\\/", "/"))
end
"""

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
# (named in the head's `_parts`) while large; a large one reaches its key staged (the API
# SETs it, a script renames it), so its bytes never enter a script.
PARTS = (
    "local OUTPUTS = {"
    + ", ".join(f'"{name}"' for name in OUTPUT_FIELDS)
    + """}

-- The keys of a job's record, as models/record.assemble reads them (store/records.py).
local function part_keys(id, keys)
  keys[#keys + 1] = K.job(id)
  keys[#keys + 1] = K.job_spec(id)
  for _, stream in ipairs(OUTPUTS) do keys[#keys + 1] = K.job_output(id, stream) end
end

local function is_apart(job, name)
  return type(job._parts) == "table" and job._parts[name] ~= nil
end

-- `name` marked apart with its digest (nil: not apart).
local function mark_apart(job, name, digest)
  local parts = type(job._parts) == "table" and job._parts or {}
  parts[name] = digest
  job._parts = next(parts) ~= nil and parts or nil
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
  return is_apart(job, name) and job._parts[name] == digest
end
"""
)

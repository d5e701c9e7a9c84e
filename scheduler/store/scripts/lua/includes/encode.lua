--- @include "LIST_FIELDS"

-- A record's head (models/record.py) as a script writes it: cjson.encode of the decoded
-- table, in hash order, "/" escaped as "\\/". Its readers put every record into the wire's
-- order and form in the API (models/record.py assemble), so Redis does not: writing one field
-- by field in Go's order cost a script ~110 000 instructions a record, a third of a report's
-- (benchmarks/script_instructions.py). A list field emptied in Lua must go, as cjson writes an
-- empty table as an object. The command goes first, where the UI's search reads it without
-- decoding the record (listing.py SEARCH).

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

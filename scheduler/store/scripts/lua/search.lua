--- @include "keys"
--- @include "get_jobs"
--- @include "listing_ids"
--- @include "number_of"

-- The web UI's search: of the `scan` jobs the newest-first listing with these filters (and
-- namespace `scope`) holds from `bound` (listing.lua listing_ids), those whose command holds
-- `needle` (given in lower case: ASCII case is ignored), up to `limit`, their page stopping
-- at `budget` bytes. Only the start of a job's head is read, or of its spec when that is
-- kept apart
-- (models/record.py): each is written with the command at its top level before any object
-- (msgspec after the ids, in Job's order; a script first: encode.lua), so the first
-- `"command":"` with no brace before it is the command's (one after a brace is a key of
-- env_vars or a selector). In a record's JSON a `,"` never falls inside a string (each quote
-- in one is escaped), so the first after the command's opening quote ends it (or the
-- closing `"}`, when the command is a spec's only field); a command longer than what was
-- read is read again 8 times larger, until it ends. The cost is bounded by `scan` and by
-- `read`, the bytes of records read (it stops before a job once past it, the first one
-- always read: the store goes on from the last one, store/search.py), not by the jobs
-- stored or their output.
-- Returns {jobs looked at, number of the last, 1 if older jobs are left (else 0), each
-- job's head (read.lua get_jobs)...}
-- How much of a job's head (or spec kept apart) is read first: its command comes before
-- any large field, so a short one ends within it.
local SEARCH_HEAD_BYTES = 2048
local read_bytes = 0
local function command_in(key)
  local size = SEARCH_HEAD_BYTES
  local head = redis.call("GETRANGE", key, 0, size - 1)
  read_bytes = read_bytes + #head
  local from = string.find(head, '"command":"', 1, true)
  if not from or string.find(string.sub(head, 2, from - 1), "{", 1, true) then return nil end
  from = from + 11
  local stop = string.find(head, ',"', from, true)
  while not stop and #head == size do  -- a longer command: 8 times more of it
    size = size * 8
    head = redis.call("GETRANGE", key, 0, size - 1)
    read_bytes = read_bytes + #head
    stop = string.find(head, ',"', from, true)
  end
  if not stop and #head < size and string.sub(head, -2) == '"}' then stop = #head end
  if not stop then return nil end
  local raw = string.sub(head, from, stop - 2)
  if not string.find(raw, "\92", 1, true) then return raw end  -- no backslash: no escape
  return cjson.decode('"' .. raw .. '"')
end

local function command_of(id)
  return command_in(K.job(id)) or command_in(K.job_spec(id)) or ""
end

local found, looked, last = {}, 0, "job-0"
local ids = listing_ids(node, status, "", scope, bound, "desc", tonumber(scan) + 1)
for i, id in ipairs(ids) do
  if i > tonumber(scan) or read_bytes >= tonumber(read) then break end
  looked = looked + 1
  last = id
  if string.find(string.lower(command_of(id)), needle, 1, true) then
    found[#found + 1] = id
    if #found >= tonumber(limit) then break end
  end
end
-- The last one's number; 0 for an old snapshot's row that is not job-N (its score is below
-- job-1's, so only such rows follow it): no number bound reaches them, none is said left.
local stop = math.floor(number_of(last))
local out = get_jobs(found, tonumber(budget))
table.insert(out, 1, #ids > looked and stop > 0 and 1 or 0)
table.insert(out, 1, stop)
table.insert(out, 1, looked)
return out

--- @include "keys"
--- @include "MAX_JOB_DIGITS"

-- A job's record is its head, whole unless a part of it is large (models/record.py): a
-- reader gets the heads and the API reads the parts stored apart that a head names (never
-- through a script: Redis copies and hashes every byte that enters or leaves one).
-- MGET in chunks: Lua's unpack() fails beyond a few thousand values (a 10 000-job page).
-- A page also stops once it holds `budget` bytes (at least one job).

local function get_jobs(ids, budget)
  local out, size = {}, 0
  for i = 1, #ids, 100 do
    local chunk = {}
    for j = i, math.min(i + 99, #ids) do chunk[#chunk + 1] = K.job(ids[j]) end
    for _, job in ipairs(redis.call("MGET", unpack(chunk))) do
      if job then
        size = size + #job
        if size > budget and #out > 0 then return out end
        out[#out + 1] = job
      end
    end
  end
  return out
end

-- Each schedule of `names` with its record, {name, record, ...}; a name without one (deleted
-- meanwhile) is left out.
local function schedule_pairs(names)
  if #names == 0 then return {} end
  local records = redis.call("HMGET", K.schedules, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    if records[i] then
      out[#out + 1] = name
      out[#out + 1] = records[i]
    end
  end
  return out
end

-- A job's number N, its score in every index but a queue: read from its id job-N
-- (models.job_number) rather than from the index, which keeps it for any other id (a row of
-- an old snapshot file: snapshot/db.py NON_JOB_SCORE). As text, the id's digits (15 are
-- below MAX_JOB_NUMBER) or the index's score: Lua's arithmetic reads it as the number, and
-- a command takes it as it is, where a Lua number is formatted first (~2 000 instructions a
-- score, a tenth of a transition's index writes).
local function number_of(id)
  local n = string.match(id, "^job%-(%d+)$")
  if n and #n <= MAX_JOB_DIGITS then return n end
  return redis.call("ZSCORE", K.all_jobs, id) or nil
end

local function load_job(id)
  local raw = redis.call("GET", K.job(id))
  return raw and cjson.decode(raw), raw
end

-- Whether a caller limited to `namespaces` sees a job or schedule of namespace `ns` (as
-- stored: nil or "" for the default's): `namespaces` is "" for every namespace, else each
-- one it sees as stored, each between commas (models/namespace.py scope: ",team-a,," for
-- team-a and default). A job it does not see is answered as one that does not exist.
local function sees(namespaces, ns)
  return namespaces == "" or string.find(namespaces, "," .. (ns or "") .. ",", 1, true) ~= nil
end

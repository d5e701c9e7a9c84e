--- @include "keys"
--- @include "enter_place"
--- @include "flag_unplaced"
--- @include "leave_fixed"
--- @include "leave_place"
--- @include "part_keys"
--- @include "QUOTA_WAITS"

-- Put jobs back as the snapshot holds them, each in every index of its place (places.py
-- enter_place, as the scripts keep them). A job already present is first taken out of its
-- old place. mark_dirty "1": the next snapshot writes them. jobs: 16 values each, at most
-- 1000 jobs: id, score, node id, status, the time it entered its status where its place
-- is scored by it (a delayed job's due time, a running run-job's start, a finished job's
-- finish; 0 for a cancelling one: asked long ago, the next sweep ends it), its job_type,
-- priority (a pending job's place in its node's queue), cpus and memory_mb (what it holds
-- on its node: room.lua hold), then its record's parts (models/record.py): head, spec,
-- stdout, stderr ("": none), then the schedule that made it ("": none), its namespace
-- ("": the default's; the set of those in use gets it) and its pending_reason (a job
-- waiting for its namespace's quota is put back in the namespace's waiting queue,
-- places.py OVER_QUOTA). Any other pending job on no node is unplaced again, and the next
-- placement pass is flagged. Each index gets one
-- ZADD/SADD for the whole batch: far cheaper than one call per job. Returns the number of
-- jobs restored.
local function unindex(id, raw)
  local ok, old = pcall(cjson.decode, raw)
  if ok and type(old) == "table" and type(old.node_id) == "string"
    and type(old.status) == "string" then
    leave_place(id, old)
  end
  leave_fixed(id)  -- whatever the old record says (or cannot say)
end
local groups = {}
-- enter_place's writes, gathered by key: {command, values...} each.
local function gather(command, key, a, b)
  local list = groups[key]
  if not list then list = {command}; groups[key] = list end
  list[#list + 1] = a
  if b then list[#list + 1] = b end
end
-- MSET or DEL of `values`, in calls small enough for Lua's unpack().
local function in_chunks(command, values, step)
  for i = 1, #values, step do
    redis.call(command, unpack(values, i, math.min(i + step - 1, #values)))
  end
end
local WIDTH = 16
local in_use = {}
local restored, job_keys = {}, {}
for i = 1, #jobs, WIDTH do
  restored[#restored + 1] = jobs[i]
  job_keys[#job_keys + 1] = K.job(jobs[i])
end
if #restored == 0 then return 0 end
for i, old in ipairs(redis.call("MGET", unpack(job_keys))) do
  if old then unindex(restored[i], old) end
end
local records, absent = {}, {}
for j, id in ipairs(restored) do
  local i = 1 + (j - 1) * WIDTH
  local keys = {}
  part_keys(id, keys)
  for k, key in ipairs(keys) do
    local value = jobs[i + 8 + k]
    if value ~= "" then
      records[#records + 1], records[#records + 2] = key, value
    else
      absent[#absent + 1] = key  -- an older record of the id may have had it
    end
  end
  local where = {node_id = jobs[i + 2], status = jobs[i + 3], job_type = jobs[i + 5],
    priority = jobs[i + 6], cpus = jobs[i + 7], memory_mb = jobs[i + 8], schedule = jobs[i + 13],
    namespace = jobs[i + 14], pending_reason = jobs[i + 15]}
  enter_place(id, jobs[i + 1], where, jobs[i + 4], gather)
  -- the namespaces in use (keys_teams.py namespaces: the default's is always counted), once each
  if jobs[i + 14] ~= "" and not in_use[jobs[i + 14]] then
    in_use[jobs[i + 14]] = true
    gather("SADD", K.namespaces, jobs[i + 14])
  end
  -- A job waiting for its namespace's quota: the next placement pass wakes what fits (what
  -- freed its room before the snapshot, quota_freed, was not kept).
  if jobs[i + 3] == "pending" and jobs[i + 2] == "" and QUOTA_WAITS[jobs[i + 15]] then
    gather("SADD", K.quota_freed, jobs[i + 14])
  end
  if mark_dirty == "1" then gather("SADD", K.dirty, id) end
end
in_chunks("DEL", absent, 1000)
in_chunks("MSET", records, 1000)
for key, list in pairs(groups) do redis.call(list[1], key, unpack(list, 2)) end
flag_unplaced()
return #restored

--- @include "keys"
--- @include "HOLDS"
--- @include "flag_unplaced"
--- @include "hold"
--- @include "made_by"
--- @include "part_keys"
--- @include "queue_score"
--- @include "unhold"

-- Put jobs back as the snapshot holds them, with every index their status needs (as the
-- scripts maintain them). A job already present is first taken out of its old indexes.
-- mark_dirty "1": the next snapshot writes them. jobs: 14 values each, at most 1000 jobs:
-- id, score, node id, status, start time (epoch s) of a running run-job or due time of a
-- delayed job or "", finish time (epoch s) of a finished job or "", priority (a pending
-- job's place in its node's queue: life.lua queue_score), cpus and memory_mb (what it holds
-- on its node: room.lua hold), then its record's parts (models/record.py): head, spec,
-- stdout, stderr ("": none), then the schedule that made it ("": none; its index). A
-- pending job on no node is unplaced again, and the next placement pass is flagged.
-- A cancelling job is restored as asked long ago: the next sweep ends it. Each index gets one
-- ZADD/SADD for the whole batch: far cheaper than one call per job. Returns the number of
-- jobs restored.
local function unindex(id, raw)
  local ok, old = pcall(cjson.decode, raw)
  if not ok or type(old) ~= "table" then return end
  local node, status = old.node_id, old.status
  if type(node) ~= "string" or type(status) ~= "string" then return end
  redis.call("ZREM", K.status(status), id)
  redis.call("ZREM", K.unplaced, id)
  if made_by(old) then redis.call("ZREM", K.schedule_jobs(old.schedule), id) end
  if node == "" then return end
  redis.call("ZREM", K.node_status(node, status), id)
  redis.call("ZREM", K.node_jobs(node), id)
  redis.call("SREM", K.node_busy(node), id)
  unhold(node, id, old)
end
local function push(groups, key, a, b)
  local list = groups[key]
  if not list then list = {}; groups[key] = list end
  list[#list + 1] = a
  if b then list[#list + 1] = b end
end
-- MSET or DEL of `values`, in calls small enough for Lua's unpack().
local function in_chunks(command, values, step)
  for i = 1, #values, step do
    redis.call(command, unpack(values, i, math.min(i + step - 1, #values)))
  end
end
local WIDTH = 14
local restored, job_keys = {}, {}
for i = 1, #jobs, WIDTH do
  restored[#restored + 1] = jobs[i]
  job_keys[#job_keys + 1] = K.job(jobs[i])
end
if #restored == 0 then return 0 end
for i, old in ipairs(redis.call("MGET", unpack(job_keys))) do
  if old then
    unindex(restored[i], old)
    redis.call("ZREM", K.deadlines, restored[i])
    redis.call("ZREM", K.finished, restored[i])
    redis.call("ZREM", K.cancelling, restored[i])
    redis.call("ZREM", K.delayed, restored[i])
    redis.call("HDEL", K.waiting, restored[i])
  end
end
local records, absent, zadds, sadds = {}, {}, {}, {}
for j, id in ipairs(restored) do
  local i = 1 + (j - 1) * WIDTH
  local score, node, status, start = jobs[i + 1], jobs[i + 2], jobs[i + 3], jobs[i + 4]
  local finish_time = jobs[i + 5]
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
  push(zadds, K.all_jobs, score, id)
  push(zadds, K.status(status), score, id)
  if jobs[i + 13] ~= "" then push(zadds, K.schedule_jobs(jobs[i + 13]), score, id) end
  local queued = status == "pending" and queue_score(score, jobs[i + 6]) or score
  if node ~= "" then
    push(zadds, K.node_jobs(node), score, id)
    push(zadds, K.node_status(node, status), queued, id)
    if HOLDS[status] then hold(node, id, {cpus = jobs[i + 7], memory_mb = jobs[i + 8]}) end
  elseif status == "pending" then
    push(zadds, K.unplaced, queued, id)
  end
  if start ~= "" and status == "delayed" then
    push(zadds, K.delayed, start, id)
  elseif start ~= "" then
    push(zadds, K.deadlines, start, id)
    push(sadds, K.node_busy(node), id)
  end
  if finish_time ~= "" then push(zadds, K.finished, finish_time, id) end
  if status == "cancelling" then push(zadds, K.cancelling, 0, id) end
  if mark_dirty == "1" then push(sadds, K.dirty, id) end
end
in_chunks("DEL", absent, 1000)
in_chunks("MSET", records, 1000)
for key, list in pairs(zadds) do redis.call("ZADD", key, unpack(list)) end
for key, list in pairs(sadds) do redis.call("SADD", key, unpack(list)) end
flag_unplaced()
return #restored

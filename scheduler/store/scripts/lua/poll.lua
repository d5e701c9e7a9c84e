--- @include "codes"
--- @include "keys"
--- @include "get_jobs"
--- @include "is_drained"
--- @include "node_access"
--- @include "note_backlog"
--- @include "quota_kit"
--- @include "backlogs"
--- @include "steal"

-- The agent's poll: the head of the node's queue (higher priority first, oldest first within
-- one: places.py queue_score), at most its room: MAX_JOBS_PER_NODE (`max_jobs`), or what its
-- agent says it runs at once when less (`capacity`, "" unsaid), less its busy slots;
-- and the ids of its jobs being cancelled (the API sends them in a header the original agent
-- ignores). A drained node starts nothing new: its running jobs finish, what stayed in its
-- queue waits.
-- Work stealing (steal.lua; `steal` "1": on, WORK_STEALING): a poll that leaves jobs waiting
-- notes them, when its node's claims name it (`named` "1": its agent says so; or a node
-- token's poll); a node whose queue is empty takes from the most backlogged queues.
-- An empty queue with nothing waiting anywhere is answered first, from three reads: most
-- polls find nothing.
-- Quotas (admit.lua; one EXISTS when no namespace has one): a job whose namespace runs all
-- its quota allows leaves the queue to wait for it (pending_reason quota), and the jobs
-- behind it are handed out in its stead; an instance-bound job, or any with an external
-- registry (`builtin` not "1": placement could not put it back), stays in the queue, passed
-- over until its namespace has room (admit.lua stays).
-- Returns {OK, {cancelling id, ...}, each job's head (read.lua get_jobs)...}
--   | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local cancels = redis.call("ZRANGE", K.node_status(node, "cancelling"), 0, 99)
local queue = K.node_status(node, "pending")
local ids = redis.call("ZRANGE", queue, 0, 1)
local function room_now()
  local most = tonumber(max_jobs)
  if capacity ~= "" then most = math.min(most, tonumber(capacity)) end
  local free = most - redis.call("SCARD", K.node_busy(node))
  if free > 0 and is_drained(node) then return 0 end
  return free
end
-- When a namespace has a quota: admit.lua's kit and this call's tallies, else nil.
local function quotas()
  if redis.call("EXISTS", K.quotas) == 0 then return nil end
  return quota_kit(), {}
end
if #ids == 0 then
  local waiting = stealing == "1" and backlogs() or {}
  local free = #waiting > 0 and room_now() or 0
  if free <= 0 then return {OK, cancels} end
  local kit, tallies = quotas()
  local admit = kit and function(job) return kit.admits(job, tallies) == kit.ADMIT end
  local taken = steal(node, free, waiting, admit)
  table.insert(taken, 1, cancels)
  table.insert(taken, 1, OK)
  return taken
end
local free = room_now()
local noted = stealing == "1" and (named == "1" or (caller ~= "open" and caller ~= "key"))
if free <= 0 then
  if noted and not is_drained(node) then note_backlog(node, redis.call("ZCARD", queue)) end
  return {OK, cancels}
end
local kit, tallies = quotas()
if kit then
  ids = kit.heads(queue, free, tallies, builtin)
  local left = redis.call("ZCARD", queue) - #ids
  if noted and #ids >= free and left > 0 then note_backlog(node, left) end
elseif free > 1 then ids = redis.call("ZRANGE", queue, 0, free) end
if #ids > free then
  ids[free + 1] = nil
  if noted then note_backlog(node, redis.call("ZCARD", queue) - free) end
end
local jobs = get_jobs(ids, math.huge)
table.insert(jobs, 1, cancels)
table.insert(jobs, 1, OK)
return jobs

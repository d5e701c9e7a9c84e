--- @include "codes"
--- @include "keys"
--- @include "get_jobs"
--- @include "is_drained"
--- @include "node_access"

-- The agent's poll: the head of the node's queue (higher priority first, oldest first within
-- one: places.py queue_score), at most its free capacity, and the ids of its jobs being
-- cancelled (the API sends them in a header the original agent ignores). A drained node
-- starts nothing new: its running jobs finish, what stayed in its queue waits.
-- An empty queue is answered first, from two reads: most polls find nothing.
-- Returns {OK, {cancelling id, ...}, each job's head (read.lua get_jobs)...}
--   | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local cancels = redis.call("ZRANGE", K.node_status(node, "cancelling"), 0, 99)
local queue = K.node_status(node, "pending")
local ids = redis.call("ZRANGE", queue, 0, 0)
if #ids == 0 then return {OK, cancels} end
local free = tonumber(max_jobs) - redis.call("SCARD", K.node_busy(node))
if free <= 0 or is_drained(node) then return {OK, cancels} end
if free > 1 then ids = redis.call("ZRANGE", queue, 0, free - 1) end
local jobs = get_jobs(ids, math.huge)
table.insert(jobs, 1, cancels)
table.insert(jobs, 1, OK)
return jobs

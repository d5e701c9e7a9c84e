--- @include "keys"
--- @include "ROOM"
--- @include "UNCHECKED"
--- @include "asks_of"
--- @include "load_job"
--- @include "number_of"
--- @include "rebind"
--- @include "serves"
--- @include "store_job"

-- Work stealing (docs/GUIDE.md, "Work stealing"): a node whose queue is empty takes jobs that
-- another node's poll left waiting. The polls say where work waits: a poll that leaves jobs
-- in its queue (its node, or its agent, has no room for them now) notes how many in
-- {P}:nodes:backlog (`note_backlog`), and an idle node's poll takes from the most backlogged
-- (`steal`), in the same script. Only a node whose claims name it may be noted (its agent
-- says so, or it polls with a node token): a job taken from it that it was handed just
-- before is then refused to it (OTHER_NODE), so no job runs twice. The original Rust agent's
-- claims are bare: its queue is never taken from, but it takes like any node.

-- How far into a queue a taker looks for a job it may run, and how many queues it tries.
local STEAL_SCAN, STEAL_QUEUES = 32, 3

-- Node `node`'s poll left `left` jobs of its queue waiting (0: none): the backlog index says
-- so; a node entering it wakes the idle nodes' long-polls (their next check takes from it).
local function note_backlog(node, left)
  if left <= 0 then
    redis.call("ZREM", K.backlog, node)
  elseif redis.call("ZADD", K.backlog, left, node) == 1 then
    redis.call("PUBLISH", K.backlog_channel, "")
  end
end

-- Whether `node` may run `job` taken from another queue: a job bound to an instance, or a
-- service, belongs to its node; the node must serve the job's namespace (a node labelled
-- for some takes only theirs: room.lua serves), its labels must match the job's
-- node_selector (a `node.id` names one node) and it must have room for what the job asks
-- now (placement's rules: place.lua).
local function may_take(node, job)
  if (job.instance_id or "") ~= "" or job.job_type == "service" then return false end
  if not serves(node, job.namespace) then return false end
  if type(job.node_selector) == "table" then
    for key, values in pairs(job.node_selector) do
      if type(values) ~= "table" then values = {values} end
      local any = false
      for _, value in ipairs(values) do
        any = any or redis.call("SISMEMBER", K.label_nodes(key .. "=" .. value), node) == 1
      end
      if not any then return false end
    end
  end
  local asks = asks_of(job)
  for i, what in ipairs(ROOM) do
    if asks[i] > 0 then
      local free = tonumber(redis.call("ZSCORE", K.nodes_free(what), node)) or UNCHECKED
      if free < asks[i] then return false end
    end
  end
  return true
end

-- Up to `want` of the `left` jobs `victim`'s last poll left waiting, for `taker`: its queue
-- read past the jobs handed to it (they come first: it is claiming them now), the oldest of
-- the highest priority first, each the taker may run rebound to it, keeping its place
-- (number, priority) and noting where it came from (`taken_from`); the records added to
-- `taken`. The backlog index then says what is left (a queue found empty leaves it).
local function steal_from(victim, taker, want, left, taken, admit)
  local queue = K.node_status(victim, "pending")
  local skip = math.max(0, redis.call("ZCARD", queue) - left)
  local ids = redis.call("ZRANGE", queue, skip, skip + STEAL_SCAN - 1)
  local took = 0
  for _, id in ipairs(ids) do
    if took >= want then break end
    local job = load_job(id)
    if job and job.status == "pending" and job.node_id == victim and may_take(taker, job)
      and (not admit or admit(job)) then
      rebind(id, number_of(id), job, "pending", taker)
      job.taken_from = victim
      taken[#taken + 1] = store_job(id, job)
      took = took + 1
    end
  end
  note_backlog(victim, #ids == 0 and 0 or left - took)
end

-- The most backlogged queues, {node, jobs left waiting, ...}: STEAL_QUEUES of them.
local function backlogs()
  return redis.call("ZREVRANGE", K.backlog, 0, STEAL_QUEUES - 1, "WITHSCORES")
end

-- The jobs `taker` (room for `free` more) takes from `queues` (backlogs()); {} unless it is
-- a placeable node (registered compute, not drained): an id no one registered takes nothing,
-- its queue would hold the jobs forever. `admit(job)` (nil: no quota is set): whether the
-- job's namespace's quota lets it be handed out (admit.lua); one it does not is not taken
-- (its own node's poll moves it to wait).
local function steal(taker, free, queues, admit)
  local taken = {}
  if not redis.call("ZSCORE", K.nodes_load, taker) then return taken end
  for i = 1, #queues, 2 do
    local victim, left = queues[i], tonumber(queues[i + 1])
    if victim == taker then
      note_backlog(taker, 0)  -- its own queue is empty: its note is old
    elseif #taken < free then
      steal_from(victim, taker, free - #taken, left, taken, admit)
    end
  end
  return taken
end

--- @include "keys"
--- @include "NOT_STARTED"
--- @include "ROOM"
--- @include "asks_of"

-- Quotas (docs/GUIDE.md, Quotas): what a namespace may run at once (jobs running or
-- cancelling, the cpus and memory_mb they ask) and hold pending. Its running use is kept by
-- every move (places.py PLACES `runs`: the generated moves call ns_use and ns_release, as
-- they call hold and unhold), so no check loops over its jobs: its running count is two
-- ZCARDs of its status indexes, its cpus and memory a hash of sums. Before place.lua's
-- files (the generated moves use it); the claim's side (admit.lua) comes after life.lua.

-- Namespace `ns`'s quota (stored name; "" the default's): a table of its limits, `running`,
-- `pending`, `cpus`, `memory_mb`, a limit absent being none; nil when it has none.
local function quota_of(ns)
  local raw = redis.call("HGET", K.quotas, ns)
  return raw and cjson.decode(raw) or nil
end

-- How many jobs namespace `ns` holds not started yet (pending, delayed or waiting: what its
-- quota's `pending` limits).
local function ns_pending(ns)
  local count = 0
  for status in pairs(NOT_STARTED) do
    count = count + redis.call("ZCARD", K.namespace_status(ns, status))
  end
  return count
end

-- Why namespace `ns` may not take a new job asking `cpus` and `memory_mb`, or nil: {what,
-- its limit, the count} when it holds as many jobs pending, delayed or waiting as its quota
-- allows (what "pending"), or the job asks more cpus or memory_mb than it may ever run.
local function quota_refusal(ns, cpus, memory_mb)
  local quota = quota_of(ns)
  if not quota then return nil end
  if quota.pending then
    local count = ns_pending(ns)
    if count >= quota.pending then return {"pending", quota.pending, count} end
  end
  local asks = {tonumber(cpus) or 0, tonumber(memory_mb) or 0}
  for i, what in ipairs(ROOM) do
    if quota[what] and asks[i] > quota[what] then return {what, quota[what], asks[i]} end
  end
  return nil
end

-- What namespace `ns` runs now: its jobs running or cancelling, and the cpus and memory_mb
-- they ask.
local function ns_in_use(ns)
  local held = redis.call("HMGET", K.namespace_held(ns), "cpus", "memory_mb")
  local running = redis.call("ZCARD", K.namespace_status(ns, "running"))
    + redis.call("ZCARD", K.namespace_status(ns, "cancelling"))
  return {running = running, cpus = tonumber(held[1]) or 0, memory_mb = tonumber(held[2]) or 0}
end

-- A job starts counting against its namespace's quota (it entered running or cancelling):
-- its cpus and memory_mb in the namespace's sums (its running count is its status index).
local function ns_use(job)
  local asks = asks_of(job)
  for i, what in ipairs(ROOM) do
    if asks[i] > 0 then
      redis.call("HINCRBY", K.namespace_held(job.namespace or ""), what, asks[i])
    end
  end
end

-- A job stops counting (it left running or cancelling: ended, requeued, lost with its node):
-- its asks out of the sums (a sum at 0 or below goes: a job that started before quotas were
-- kept was never counted); when jobs of its namespace wait for quota, the next placement pass wakes
-- those that now fit (admit.lua wake_freed; one EXISTS when none waits, the usual case).
local function ns_release(job)
  local ns = job.namespace or ""
  local asks = asks_of(job)
  for i, what in ipairs(ROOM) do
    if asks[i] > 0 and redis.call("HINCRBY", K.namespace_held(ns), what, -asks[i]) <= 0 then
      redis.call("HDEL", K.namespace_held(ns), what)  -- none held: as a restore leaves it
    end
  end
  if redis.call("EXISTS", K.over_quota(ns)) == 1 then
    redis.call("SADD", K.quota_freed, ns)  -- the next placement pass wakes them
    redis.call("SET", K.unplaced_retry, "-inf")
  end
end

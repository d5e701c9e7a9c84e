--- @include "keys"
--- @include "number_of"
--- @include "count_use"
--- @include "ns_in_use"
--- @include "enter_place"
--- @include "leave_place"
--- @include "load_job"
--- @include "quota_fits"
--- @include "quota_of"
--- @include "rebind"
--- @include "store_job"

-- The claim's side of quotas (quota.lua; docs/GUIDE.md, Quotas): which of a node's queue
-- its poll hands out, and the job that leaves the queue to wait for its namespace's quota.
-- After life.lua (it rebinds jobs), before steal.lua (an idle node's poll admits too).

-- What `admits` says of a job: hand it out; pass over it in this call (its namespace's
-- running jobs leave it room, but not beside the jobs this call handed out already: a
-- later poll takes it); or it waits for quota (its running jobs leave it none).
local ADMIT, PASS, OVER = 1, 2, 3

-- Whether this call may hand `job` out under its namespace's quota. `tallies` holds, per
-- namespace met in the call, false (no quota) or {quota, use}: what runs, plus what the
-- call admitted so far.
local function admits(job, tallies)
  local ns = job.namespace or ""
  local tally = tallies[ns]
  if tally == nil then
    local quota = quota_of(ns)
    local runs = quota and ns_in_use(ns)
    tally = quota and {quota = quota, runs = runs, use = {running = runs.running,
      cpus = runs.cpus, memory_mb = runs.memory_mb}} or false
    tallies[ns] = tally
  end
  if not tally then return ADMIT end
  if not quota_fits(tally.quota, tally.runs, job) then return OVER end
  if not quota_fits(tally.quota, tally.use, job) then return PASS end
  count_use(tally.use, job, 1)
  return ADMIT
end

-- Job `id` (pending on a node) leaves its queue to wait for its namespace's quota: pending on
-- no node (its node's room given back), pending_reason quota, which puts it in the
-- namespace's K.over_quota by its queue score rather than among the unplaced jobs
-- (places.py OVER_QUOTA). The namespace runs jobs, so one
-- of them ending wakes it (quota.lua ns_release); so does a change of its quota.
local function wait_quota(id, n, job)
  job.pending_reason = "quota"  -- first: it says which index of a job on no node it enters
  rebind(id, n, job, "pending", "")
  store_job(id, job)
end

-- How far into its queue a poll looks for jobs it may hand out when quotas are set.
local QUOTA_SCAN = 100

-- The head of `queue` (a node's pending jobs, queue order) a poll hands out under the
-- namespaces' quotas: up to `free` jobs it admits (`admits`, its `tallies`), each job over
-- its namespace's quota moved out of the queue to wait (`wait_quota`), passing over those
-- it may not hand out now, so a namespace at its quota never holds up the others' jobs
-- behind it; at most QUOTA_SCAN jobs looked at.
local function quota_heads(queue, free, tallies)
  local out, start, looked = {}, 0, 0
  while #out < free and looked < QUOTA_SCAN do
    local ids = redis.call("ZRANGE", queue, start, start + free - #out - 1)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      looked = looked + 1
      local raw = redis.call("GET", K.job(id))
      local job = raw and cjson.decode(raw)
      local verdict = job and admits(job, tallies)
      if verdict == OVER then
        wait_quota(id, number_of(id), job)  -- out of the queue: the next one moves up
      else
        start = start + 1
        if verdict == ADMIT then out[#out + 1] = id end
      end
    end
  end
  return out
end

-- The jobs a namespace's waiting queue wakes at most in one call (a release frees one job's
-- worth; a quota raised or lifted more, and its next releases wake the rest).
local WAKE_MOST = 16

-- The oldest jobs of namespace `ns` waiting for its quota (K.over_quota, queue order) that
-- fit now, in order until the first that does not (FIFO within a namespace: a small job
-- does not pass a big one), back among the unplaced jobs (their place's other index: their
-- pending_reason cleared, the placement pass gives them one), the pass flagged. Entries
-- whose job no longer waits for quota go.
local function wake_quota(ns)
  local quota, use = quota_of(ns) or {}, ns_in_use(ns)
  local waiting = K.over_quota(ns)
  local woken = 0
  for _, id in ipairs(redis.call("ZRANGE", waiting, 0, WAKE_MOST - 1)) do
    local job = load_job(id)
    if job and job.status == "pending" and job.node_id == "" and job.pending_reason == "quota" then
      if not quota_fits(quota, use, job) then break end
      count_use(use, job, 1)
      leave_place(id, job)
      job.pending_reason = nil
      enter_place(id, number_of(id), job, 0, redis.call)
      store_job(id, job)
      woken = woken + 1
    else
      redis.call("ZREM", waiting, id)  -- a stale entry
    end
  end
  if woken > 0 then redis.call("SET", K.unplaced_retry, "-inf") end
end

-- The namespaces a job left running in since the last pass (quota.lua ns_release), each
-- woken: PLACE_UNPLACED's first step.
local function wake_freed()
  local ns = redis.call("SPOP", K.quota_freed)
  while ns do
    wake_quota(ns)
    ns = redis.call("SPOP", K.quota_freed)
  end
end

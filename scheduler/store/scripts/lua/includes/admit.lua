--- @include "keys"
--- @include "QUOTA_WAITS"
--- @include "REASON"
--- @include "ROOM"
--- @include "asks_of"
--- @include "enter_place"
--- @include "leave_place"
--- @include "load_job"
--- @include "ns_in_use"
--- @include "number_of"
--- @include "quota_of"
--- @include "rebind"
--- @include "store_job"

-- The claim's side of quotas (quota.lua; docs/GUIDE.md, Quotas): which of a node's queue
-- its poll hands out, the job that leaves the queue to wait for its namespace's quota, and
-- the waiting ones woken. After life.lua (it rebinds jobs). One definition, `quota_kit`,
-- whose functions are made only when a namespace has a quota: the scripts that may need
-- them (the poll, the claim) would otherwise make them again on every call.

-- How far into its queue a poll looks for jobs it may hand out when quotas are set.
local QUOTA_SCAN = 100

-- The jobs a namespace's waiting queue wakes at most in one call (a release frees one job's
-- worth; a quota raised or lifted more, and its next releases wake the rest), and how far
-- into it one call looks, past the jobs asking more than the quota allows at all.
local WAKE_MOST, WAKE_SCAN = 16, 100

-- The functions of quotas' admission, as a table:
-- - `admits(job, tallies)`: whether this call may hand `job` out under its namespace's
--   quota: ADMIT; PASS over it in this call (its namespace's running jobs leave it room,
--   but not beside the jobs this call handed out already: a later poll takes it); or OVER,
--   it waits for quota (its running jobs leave it none). `tallies` holds, per namespace met
--   in the call, false (no quota) or {quota, runs: what runs, use: that and what the call
--   admitted so far}.
-- - `stays(job, builtin)`: whether a job held back for quota stays in its node's queue,
--   passed over by the polls until its namespace has room (a refused claim leaves it
--   pending there): an instance-bound job, or any job with an external registry (`builtin`
--   not "1": placement reads the built-in registry's nodes only, so it could not put the
--   job back on a node).
-- - `wait_quota(id, n, job)`: job `id` (pending on a node) leaves its queue to wait for its
--   namespace's quota: pending on no node (its node's room given back), pending_reason
--   quota, which puts it in the namespace's K.over_quota by its queue score rather than
--   among the unplaced jobs (places.py OVER_QUOTA); exceeds_quota instead when it asks
--   more cpus or memory_mb than the quota allows at all (in the same queue: it waits for
--   the quota to be raised). The namespace runs jobs, so one of them ending wakes it
--   (quota.lua ns_release); so does a change of its quota.
-- - `heads(queue, free, tallies, builtin)`: the head of `queue` (a node's pending jobs,
--   queue order) a poll hands out: up to `free` jobs it admits, each job OVER moved out of
--   the queue to wait (or passed over, when it `stays`), passing over those it may not hand
--   out now, so a namespace at its quota never holds up the others' jobs behind it; at most
--   QUOTA_SCAN jobs looked at.
-- - `wake(ns)`: the oldest jobs of namespace `ns` waiting for its quota that fit now, in
--   order until the first that does not (FIFO within a namespace: a small job does not pass
--   a big one), back among the unplaced jobs (their place's other index: their
--   pending_reason cleared, the placement pass gives them one), the pass flagged; a job
--   asking more than the quota allows at all is passed over (its pending_reason
--   exceeds_quota: it never holds up the jobs behind it); entries whose job no longer waits
--   for quota go. At most WAKE_MOST woken, WAKE_SCAN looked at.
local function quota_kit()
  local ADMIT, PASS, OVER = 1, 2, 3
  local kit = {ADMIT = ADMIT}

  local function count_use(use, job)
    use.running = use.running + 1
    use.cpus = use.cpus + (tonumber(job.cpus) or 0)
    use.memory_mb = use.memory_mb + (tonumber(job.memory_mb) or 0)
  end

  -- Whether `job` may run beside `use` under `quota`.
  local function fits(quota, use, job)
    if quota.running and use.running + 1 > quota.running then return false end
    local asks = asks_of(job)
    for i, what in ipairs(ROOM) do
      if quota[what] and asks[i] > 0 and use[what] + asks[i] > quota[what] then return false end
    end
    return true
  end

  -- Whether `job` asks more than `quota` allows at all: it fits only once it is raised.
  local function never_fits(quota, job)
    return not fits(quota, {running = 0, cpus = 0, memory_mb = 0}, job)
  end

  -- Job `id`'s pending_reason set to `reason` (the same index: both wait for quota).
  local function say(id, job, reason)
    if job.pending_reason ~= reason then
      job.pending_reason = reason
      store_job(id, job)
    end
  end

  function kit.admits(job, tallies)
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
    if not fits(tally.quota, tally.runs, job) then return OVER end
    if not fits(tally.quota, tally.use, job) then return PASS end
    count_use(tally.use, job)
    return ADMIT
  end

  function kit.stays(job, builtin)
    return builtin ~= "1" or (job.instance_id or "") ~= ""
  end

  function kit.wait_quota(id, n, job)
    local quota = quota_of(job.namespace or "")
    -- First: it says which index of a job on no node it enters.
    job.pending_reason = quota and never_fits(quota, job) and REASON.exceeds_quota or REASON.quota
    rebind(id, n, job, "pending", "")
    store_job(id, job)
  end

  function kit.heads(queue, free, tallies, builtin)
    local out, start, looked = {}, 0, 0
    while #out < free and looked < QUOTA_SCAN do
      local ids = redis.call("ZRANGE", queue, start, start + free - #out - 1)
      if #ids == 0 then break end
      for _, id in ipairs(ids) do
        looked = looked + 1
        local job = load_job(id)
        local verdict = job and kit.admits(job, tallies)
        if verdict == OVER and not kit.stays(job, builtin) then
          kit.wait_quota(id, number_of(id), job)  -- out of the queue: the next one moves up
        else
          start = start + 1
          if verdict == ADMIT then out[#out + 1] = id end
        end
      end
    end
    return out
  end

  function kit.wake(ns)
    local quota, use = quota_of(ns) or {}, ns_in_use(ns)
    local waiting = K.over_quota(ns)
    local woken = 0
    for _, id in ipairs(redis.call("ZRANGE", waiting, 0, WAKE_SCAN - 1)) do
      local job = load_job(id)
      local waits = job and job.status == "pending" and job.node_id == ""
        and QUOTA_WAITS[job.pending_reason]
      if not waits then
        redis.call("ZREM", waiting, id)  -- a stale entry
      elseif never_fits(quota, job) then
        say(id, job, REASON.exceeds_quota)  -- passed over: it waits for the quota to be raised
      elseif not fits(quota, use, job) then
        say(id, job, REASON.quota)
        break
      else
        count_use(use, job)
        leave_place(id, job)
        job.pending_reason = nil
        enter_place(id, number_of(id), job, 0, redis.call)
        store_job(id, job)
        woken = woken + 1
        if woken >= WAKE_MOST then break end
      end
    end
    if woken > 0 then redis.call("SET", K.unplaced_retry, "-inf") end
  end

  return kit
end

-- The namespaces a job left running in since the last pass (quota.lua ns_release), each
-- woken (quota_kit wake): PLACE_UNPLACED's first step (one SPOP when none is).
local function wake_freed()
  local ns = redis.call("SPOP", K.quota_freed)
  if not ns then return end
  local kit = quota_kit()
  while ns do
    kit.wake(ns)
    ns = redis.call("SPOP", K.quota_freed)
  end
end

--- @include "keys"
--- @include "ENDED_UNITS"
--- @include "ENDINGS"
--- @include "FINAL"
--- @include "NOT_STARTED"
--- @include "SETTLE_UNITS"
--- @include "VISIT_UNITS"
--- @include "count_minute"
--- @include "load_job"
--- @include "move_job"
--- @include "needs_fit"
--- @include "number_of"
--- @include "pace_of"
--- @include "publish"
--- @include "rebind"
--- @include "record_attempt"
--- @include "record_units"
--- @include "set_output"
--- @include "store_job"
--- @include "wake_job"
--- @include "wake_node"

-- A job's ending and the jobs that wait for it: `finish`, the one way a job ends, and the
-- settling of its waiters in pieces of bounded work (docs/GUIDE.md, Dependencies), after
-- life.lua and before node_loss.lua, which ends jobs.
--
-- Ending a job ends or releases what waits for it, and theirs in turn: a graph a user built may
-- hold thousands of jobs, each waited for by up to MAX_WAITERS. So no script settles a whole
-- cascade. A job's ending captures the set of its waiters under the number of its event (one
-- RENAME: a job retried and ended again starts a new set, never mixed with the first) as an
-- entry of `{P}:endings`; the script that ended it settles entries while its `pace` lasts, and
-- what is left stays there, durable, for the workers' task (SETTLE_ENDINGS, upkeep.py), which
-- settles it in calls of the same bound, one after another until none is left. The work it
-- may do is counted in units (endings.py, units.lua).

-- A waiting job whose wait is over (out of K.waiting: places.py): pending on its node,
-- or, asking a fit (or on none), unplaced for the next placement pass (its node was
-- chosen before it had to wait). Its run_at says since when it may run (`stamp`, now; a
-- later one kept): the dashboard's wait to running counts from there, not from its submit
-- (series.lua count_started).
local function release_waiter(id, n, job, stamp)
  if type(job.run_at) ~= "string" or job.run_at < stamp then job.run_at = stamp end
  rebind(id, n, job, "pending", needs_fit(job) and "" or job.node_id)
end

-- One job's ending (finish, below; and a waiter's, settle_waiter): charged to `pace`. Its
-- waiters are captured under its event's number as an entry of K.endings,
-- "<id> <number> <status> <reason>", for the caller (or SETTLE_ENDINGS) to settle.
local function end_one(id, n, job, ending, now, stamp, pace)
  if FINAL[job.status] then error("ending " .. id .. ": it has ended already") end
  record_attempt(id, job, ending, stamp)
  local status, reason = ENDINGS[ending][1], ENDINGS[ending][2]
  local ran = not NOT_STARTED[job.status]  -- its node's slot is free again: woken
  job.finished_at = stamp
  local number = move_job(id, n, job, status, job.node_id, now, reason)
  job.pending_reason = nil  -- after the move: it says which index of a pending job it left
  if ran then wake_node(job.node_id) end
  count_minute(now, status)
  publish(id, status, number)
  wake_job(id)
  if redis.call("EXISTS", K.dependents(id)) == 1 then
    redis.call("RENAME", K.dependents(id), K.ending_waiters(number))
    local entry = id .. " " .. number .. " " .. status .. " " .. reason
    redis.call("ZADD", K.endings, 0, entry)
    pace.own[#pace.own + 1] = entry
  end
  pace.left = pace.left - ENDED_UNITS
  return store_job(id, job)
end

-- Waiter `w` of the ending of `dep` (`status`, `reason`): done, one fewer to wait for (the
-- last makes it pending); any other ending fails it (dependency_failed), capturing its own
-- waiters in turn. A job no longer in K.waiting (ended already: by another dependency, a
-- cancel) is passed over: every waiting job is in it, and only those. Returns the units spent,
-- or nil when `pace` cannot pay for its record (a call that spent nothing always can).
local function settle_waiter(w, dep, status, reason, now, stamp, pace)
  local count = redis.call("HGET", K.waiting, w)
  if not count then return VISIT_UNITS end
  if status == "done" and tonumber(count) > 1 then
    redis.call("HINCRBY", K.waiting, w, -1)
    return VISIT_UNITS
  end
  local price = VISIT_UNITS + ENDED_UNITS + record_units(redis.call("STRLEN", K.job(w)))
  if price > pace.left and pace.left < pace.units then return nil end
  local waiter = load_job(w)
  if not waiter or waiter.status ~= "waiting" then return VISIT_UNITS end
  local wn = number_of(w)
  if status == "done" then
    release_waiter(w, wn, waiter, stamp)
    store_job(w, waiter)
    return price
  end
  local why = "dependency " .. dep .. " ended " .. (reason ~= "" and reason or status)
  set_output(w, waiter, "stderr", why)
  end_one(w, wn, waiter, "dependency_failed", now, stamp, pace)
  return price - ENDED_UNITS  -- end_one charged the ending
end

-- The waiters of one entry of K.endings, taken from its set one by one while `pace` can pay
-- for the dearest small one (a visit that ends the job) and the waiter taken (its record's
-- size); the entry leaves K.endings once its set is empty. Returns true when it is settled.
local function settle_entry(entry, pace, now, stamp)
  local dep, number, status, reason = string.match(entry, "^(%S+) (%S+) (%S+) (.*)$")
  local waiters = K.ending_waiters(number)
  while pace.left >= VISIT_UNITS + ENDED_UNITS do
    local w = redis.call("SPOP", waiters)
    if not w then
      redis.call("ZREM", K.endings, entry)
      return true
    end
    local spent = settle_waiter(w, dep, status, reason, now, stamp, pace)  -- may charge pace
    if not spent then
      redis.call("SADD", waiters, w)  -- the next call's
      pace.left = 0
      return false
    end
    pace.left = pace.left - spent
  end
  return false
end

-- The entries of the endings this call made, in order, while `pace` lasts.
local function settle_own(pace, now, stamp)
  while pace.next <= #pace.own and pace.left >= VISIT_UNITS + ENDED_UNITS do
    if settle_entry(pace.own[pace.next], pace, now, stamp) then pace.next = pace.next + 1 end
  end
end

-- The one way a job ends, whoever ends it: `ending` names how (models.ENDINGS: done, failed,
-- cancelled, timed_out, node_lost, dependency_failed), which sets its status (done or
-- failed: all the original's clients know) and its failure_reason. It gives back what the
-- job held (its node may take work again), moves it to its final indexes with its finish
-- time (retention reads it), and puts its ending in the outbox under its job event's number
-- (events.lua move_job): exactly one per job, here and nowhere else. Then the jobs waiting
-- for it, as far as `pace` goes (nil: a pace of its own, SETTLE_UNITS; a script ending many
-- jobs shares one): done, one fewer to wait for (the last makes a job pending); any other
-- ending fails them, and theirs in turn. The rest waits in K.endings for SETTLE_ENDINGS.
-- The caller has set the job's other fields. Returns the stored record.
local function finish(id, n, job, ending, now, stamp, pace)
  pace = pace or pace_of(SETTLE_UNITS)
  local stored = end_one(id, n, job, ending, now, stamp, pace)
  pace.left = pace.left - record_units(#stored)
  settle_own(pace, now, stamp)
  return stored
end

-- The first job of `after` that has failed, or nil. Reads only.
local function failed_dependency(after)
  for _, dep in ipairs(after) do
    if redis.call("ZSCORE", K.status("failed"), dep) then return dep end
  end
  return nil
end

-- The first job of `after` already waited for by `most` jobs (job `id` not among them: a
-- retried one may be still), or nil. Reads only.
local function crowded_dependency(after, most, id)
  for _, dep in ipairs(after) do
    local waiters = K.dependents(dep)
    if redis.call("SCARD", waiters) >= tonumber(most)
      and not (id and redis.call("SISMEMBER", waiters, id) == 1) then
      return dep
    end
  end
  return nil
end

-- What a new (or restored, or retried) job that runs `after` others must do: {waits,
-- failed}: how many of them are not done yet (each then counts it among its dependents),
-- and the first that failed, if any (then nothing is written). A job not in Redis (pruned
-- once it ended) counts as done.
local function wait_for(id, after)
  local failed = failed_dependency(after)
  if failed then return 0, failed end
  local waits = 0
  for _, dep in ipairs(after) do
    if redis.call("ZSCORE", K.all_jobs, dep)
      and not redis.call("ZSCORE", K.status("done"), dep) then
      waits = waits + 1
      redis.call("SADD", K.dependents(dep), id)
    end
  end
  if waits > 0 then redis.call("HSET", K.waiting, id, waits) end
  return waits, nil
end

-- A job about to wait again (a retry by hand): out of the unsettled endings of what it runs
-- after, which were for its earlier wait, not this one (their status is not what it waits
-- for now). Entries are scored 0, so one job's are a range by id.
local function forget_earlier_waits(id, after)
  for _, dep in ipairs(after) do
    local first, past = "[" .. dep .. " ", "(" .. dep .. "!"  -- "!" follows " "
    for _, entry in ipairs(redis.call("ZRANGEBYLEX", K.endings, first, past)) do
      redis.call("SREM", K.ending_waiters(string.match(entry, "^%S+ (%S+)")), id)
    end
  end
end

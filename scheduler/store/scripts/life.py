"""A job's life in Lua: the only code that moves a job between its indexes, ends it
(`finish`) or tries it again (`requeue`), and records each attempt as it ends (ATTEMPTS).
Part of the scripts' library (library.py), which gives each script the definitions it
uses."""

from scheduler.models.attempt import ATTEMPT_TAIL_BYTES, ATTEMPTS_KEPT
from scheduler.models.series import WAIT_BOUNDS

# An attempt's end, kept apart from the record (models/attempt.py says what, and why): one
# JSON entry pushed on the job's attempts list, which keeps the last ATTEMPTS_KEPT. Called
# by finish and requeue only, before they change the job: its status says whether the
# attempt ran (running or cancelling: started at running_at; pending or delayed: never).
ATTEMPTS = f"""
-- The last ATTEMPT_TAIL_BYTES of `text`, from a character's first byte (valid UTF-8 stays so).
local function output_tail(text)
  if #text <= {ATTEMPT_TAIL_BYTES} then return text end
  local first = #text - {ATTEMPT_TAIL_BYTES} + 1
  while first < #text do
    local byte = string.byte(text, first)
    if byte < 128 or byte >= 192 then break end
    first = first + 1
  end
  return string.sub(text, first)
end

local function record_attempt(id, job, reason, stamp)
  local out = {{'{{"attempt":' .. ((job.retry_count or 0) + 1),
    '"node_id":' .. cjson.encode(job.node_id)}}
  local ran = job.status == "running" or job.status == "cancelling"
  if ran and type(job.running_at) == "string" then
    out[#out + 1] = '"started_at":' .. cjson.encode(job.running_at)
  end
  out[#out + 1] = '"ended_at":' .. cjson.encode(stamp)
  if type(job.exit_code) == "number" then
    out[#out + 1] = '"exit_code":' .. cjson.encode(job.exit_code)
  end
  out[#out + 1] = '"reason":' .. cjson.encode(reason)
  for _, name in ipairs({{"stdout", "stderr"}}) do
    local text = job[name]
    if type(text) == "string" and text ~= "" then
      out[#out + 1] = '"' .. name .. '":' .. cjson.encode(output_tail(text))
    end
  end
  local key = K.attempts(id)
  redis.call("RPUSH", key, (string.gsub(table.concat(out, ",") .. "}}", "\\\\/", "/")))
  redis.call("LTRIM", key, -{ATTEMPTS_KEPT}, -1)
end
"""

# A job's life. Every index a job is in follows from its status and node (docs/ARCHITECTURE.md,
# "Redis keys"); these are the only code that moves a job between them.
LIFE = """
-- Job number n's score in a node's queue (its pending index, which POLL reads from the
-- lowest): higher priority first, by number within one. Every entry of a node's queue is
-- scored here. Exact as a double for |priority| <= 1000 (models.MAX_PRIORITY) and n < 2^42;
-- priority 0 (nil: none) scores n itself, the original's FIFO. The node's other indexes and
-- the status indexes are scored by n.
local function queue_score(n, priority)
  return n - (tonumber(priority) or 0) * 4398046511104
end

-- `score`: the job's score in the node's index of `to` (queue_score for a queue), n without.
local function move(id, n, node, from, to, score)
  redis.call("ZREM", K.status(from), id)
  redis.call("ZADD", K.status(to), n, id)
  redis.call("ZREM", K.node_status(node, from), id)
  redis.call("ZADD", K.node_status(node, to), score or n, id)
end

-- The changed job stored and marked for the next snapshot; returns what was stored.
local function store_job(id, job)
  local out = encode(job)
  redis.call("SET", K.job(id), out)
  redis.call("SADD", K.dirty, id)
  return out
end

local function publish(id, status)
  local n = redis.call("INCR", K.event_seq)
  local message = '{"job_id":' .. cjson.encode(id) .. ',"status":"' .. status .. '"}'
  redis.call("RPUSH", K.outbox, n .. " " .. message)
end

-- Job `id` (number n) from its status on its node to status `new` on node `to`, in every
-- index that names the node or the status. The caller stores the record.
local function rebind(id, n, job, new, to)
  local from = job.node_id
  local score = new == "pending" and queue_score(n, job.priority) or n
  move(id, n, from, job.status, new, score)
  if to ~= from then
    redis.call("ZREM", K.node_status(from, new), id)
    redis.call("ZADD", K.node_status(to, new), score, id)
    redis.call("ZREM", K.node_jobs(from), id)
    redis.call("ZADD", K.node_jobs(to), n, id)
  end
  job.node_id, job.status = to, new
  wake_job(id)
  if new == "pending" then wake_node(to) end
end

-- What a running (or cancelling) job holds, given back: its node's slot, its deadline, its
-- cancel grace.
local function release(id, job)
  redis.call("SREM", K.node_busy(job.node_id), id)
  redis.call("ZREM", K.deadlines, id)
  redis.call("ZREM", K.cancelling, id)
end

-- One job's ending (finish, below, ends the jobs waiting for it through this too); `ended`
-- collects {id, status, reason} of the jobs whose waiters must then be settled.
local function end_one(id, n, job, ending, now, stamp, ended)
  if FINAL[job.status] then error("ending " .. id .. ": it has ended already") end
  record_attempt(id, job, ending, stamp)
  local status, reason = ENDINGS[ending][1], ENDINGS[ending][2]
  if job.status == "running" or job.status == "cancelling" then
    release(id, job)
    wake_node(job.node_id)
  elseif job.status == "delayed" then
    redis.call("ZREM", K.delayed, id)
  elseif job.status == "waiting" then
    redis.call("HDEL", K.waiting, id)
  end
  move(id, n, job.node_id, job.status, status)
  job.status, job.finished_at = status, stamp
  if reason ~= "" then job.failure_reason = reason end
  redis.call("ZADD", K.finished, now, id)
  count_minute(now, status)
  publish(id, status)
  wake_job(id)
  ended[#ended + 1] = {id, status, reason}
  return store_job(id, job)
end

-- The one way a job ends, whoever ends it: `ending` names how (models.ENDINGS: done, failed,
-- cancelled, timed_out, node_lost, dependency_failed), which sets its status (done or
-- failed: all the original's clients know) and its failure_reason. It gives back what the
-- job held (its node may take work again), moves it to its final indexes with its finish
-- time (retention reads it), and publishes its event: exactly one per job, here and nowhere
-- else. Then the jobs waiting for it: done, one fewer to wait for (the last makes a job
-- pending); any other ending fails them, and theirs in turn (a worklist, not recursion: a
-- chain of any length). The caller has set the job's other fields. Returns the stored record.
local function finish(id, n, job, ending, now, stamp)
  local ended = {}
  local stored = end_one(id, n, job, ending, now, stamp, ended)
  local next_one = 1
  while next_one <= #ended do
    local dep, status, reason = ended[next_one][1], ended[next_one][2], ended[next_one][3]
    next_one = next_one + 1
    local waiters = redis.call("SMEMBERS", K.dependents(dep))
    for _, w in ipairs(waiters) do
      local waiter = load_job(w)
      if waiter and waiter.status == "waiting" then
        local wn = redis.call("ZSCORE", K.all_jobs, w)
        if status ~= "done" then
          waiter.stderr = "dependency " .. dep .. " ended " .. (reason ~= "" and reason or status)
          end_one(w, wn, waiter, "dependency_failed", now, stamp, ended)
        elseif redis.call("HINCRBY", K.waiting, w, -1) <= 0 then
          redis.call("HDEL", K.waiting, w)
          rebind(w, wn, waiter, "pending", waiter.node_id)
          store_job(w, waiter)
        end
      end
    end
    if #waiters > 0 then redis.call("DEL", K.dependents(dep)) end
  end
  return stored
end

-- The first job of `after` that has failed, or nil. Reads only.
local function failed_dependency(after)
  for _, dep in ipairs(after) do
    if redis.call("ZSCORE", K.status("failed"), dep) then return dep end
  end
  return nil
end

-- What a new (or restored) job that runs `after` others must do: {waits, failed}: how many
-- of them are not done yet (each then counts it among its dependents), and the first that
-- failed, if any (then nothing is written). A job not in Redis (pruned once it ended)
-- counts as done.
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

-- The jobs that entered `index` (a sorted set scored by when) before `cutoff`, `batch` of
-- them: each leaves the index, and `settle(id, n, job)` ends (or retries) one still `held`
-- (the timeout sweep, the cancels past their grace). Returns {entries read, the ids
-- settled...}: fewer entries than `batch` means the index holds no more expired ones.
local function settle_expired(index, cutoff, batch, held, settle)
  local expired = redis.call("ZRANGEBYSCORE", index, "-inf", "(" .. cutoff, "LIMIT", 0, batch)
  local settled = {#expired}
  for _, id in ipairs(expired) do
    redis.call("ZREM", index, id)
    local job = load_job(id)
    if job and job.status == held then
      settle(id, redis.call("ZSCORE", K.all_jobs, id), job)
      settled[#settled + 1] = id
    end
  end
  return settled
end

-- Whether a job may be tried again: its own max_retries, or the deployment's.
local function retries_left(job, max_retries)
  return (job.retry_count or 0) < (job.max_retries or tonumber(max_retries))
end

-- Seconds to wait before the job's next attempt: its own retry_backoff_secs or the
-- deployment's `backoff`, doubled per retry already made, at most `cap`, with equal jitter
-- (half of it fixed, half spread by the job's share of `seed`, so jobs retried together do
-- not come back together). 0: at once, the original's retry.
local function retry_wait(job, n, backoff, cap, seed)
  local base = job.retry_backoff_secs or tonumber(backoff)
  if base <= 0 then return 0 end
  local wait = math.min(tonumber(cap), base * 2 ^ (job.retry_count or 0))
  local jitter = (tonumber(seed) + n * 0.6180339887498949) % 1
  return wait / 2 + wait / 2 * jitter
end

-- A running job's next attempt (a failed report, its node lost, a timeout under its own
-- policy): pending again on node `to`, or delayed `wait` seconds (its run_at says when). It
-- has not ended, so no event; the attempt that ended is recorded, `reason` (an ending's
-- name: failed, node_lost, timed_out) saying how, at `stamp`. `counted`: the attempt uses
-- one of its retries (a service placed again after its node was lost does not). Returns
-- the stored record.
local function requeue(id, n, job, to, counted, wait, now, stamp, reason)
  record_attempt(id, job, reason, stamp)
  release(id, job)
  if counted then job.retry_count = (job.retry_count or 0) + 1 end
  job.exit_code, job.stdout, job.finished_at, job.failure_reason = nil, nil, nil, nil
  if wait > 0 then
    local due = math.floor((now + wait) * 1000000 + 0.5) / 1000000  -- as run_at writes it
    job.run_at = rfc3339(due)
    rebind(id, n, job, "delayed", to)
    redis.call("ZADD", K.delayed, due, id)
  else
    rebind(id, n, job, "pending", to)
  end
  return store_job(id, job)
end

-- The jobs of `node` in `status` (pending; or waiting or delayed, which become pending on
-- their node later) that are not instance-bound, moved to `live` nodes round-robin, in
-- queue order, keeping their number and priority (their place in the queue) and their
-- status, until `moved` holds `limit` triples {id, from node, to node}. Instance-bound jobs
-- belong to their node and stay.
local function move_jobs(node, status, live, limit, moved)
  if #live == 0 then return end
  local queue, skipped = K.node_status(node, status), 0
  while #moved < 3 * limit do
    local ids = redis.call("ZRANGE", queue, skipped, skipped + 99)
    if #ids == 0 then return end
    for _, id in ipairs(ids) do
      local job = load_job(id)
      if not job or job.node_id ~= node or job.status ~= status then
        redis.call("ZREM", queue, id)  -- a stale entry: the job is not here in that status
      elseif (job.instance_id or "") ~= "" then
        skipped = skipped + 1
      else
        local target = next_live(live)
        rebind(id, redis.call("ZSCORE", K.all_jobs, id), job, status, target)
        store_job(id, job)
        moved[#moved + 1], moved[#moved + 2], moved[#moved + 3] = id, node, target
        if #moved >= 3 * limit then return end
      end
    end
  end
end

local function move_pending(node, live, limit, moved)
  move_jobs(node, "pending", live, limit, moved)
end

-- The running jobs of `node`, whose agent is gone (its node lost, or its id passed to a new
-- holder), under the node-loss rule (Nomad's lost allocations): a run job fails with stderr
-- "node lost" under the retry rule (`policy`: {max_retries, backoff, backoff_cap, seed}):
-- with retries left it is pending again (retry_count + 1, no event) on a `live` node (or
-- delayed there by its backoff), else it ends failed (exit -1, failure_reason node_lost,
-- its event). A service is placed again, pending on a live node (its retry count unchanged,
-- no event). An instance-bound job stays on its node, and with no live node a job waits
-- pending on its node. Until `out` holds `limit` quadruples {id, from, to, new status}.
local function lose_running(node, live, limit, out, now, stamp, policy)
  local max_retries, backoff, backoff_cap, seed = unpack(policy)
  local room = limit - #out / 4
  if room <= 0 then return end
  -- Each job handled leaves the node's running index, so the head is always the next one.
  local running = K.node_status(node, "running")
  for _, id in ipairs(redis.call("ZRANGE", running, 0, room - 1)) do
    local job = load_job(id)
    local n = redis.call("ZSCORE", K.all_jobs, id)
    if not job or job.status ~= "running" or not n then
      redis.call("SREM", K.node_busy(node), id)  -- a stale entry
      redis.call("ZREM", K.deadlines, id)
      redis.call("ZREM", running, id)
    else
      local service = job.job_type == "service"
      job.stderr = "node lost"
      if service or retries_left(job, max_retries) then
        local target = node
        if (job.instance_id or "") == "" then target = next_live(live) or node end
        local wait = service and 0 or retry_wait(job, n, backoff, backoff_cap, seed)
        requeue(id, n, job, target, not service, wait, now, stamp, "node_lost")
      else
        job.exit_code = -1
        finish(id, n, job, "node_lost", now, stamp)
      end
      out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, node, job.node_id, job.status
    end
  end
end
"""

# The dashboard's series (models/series.py, ui_dashboard.py): per minute of `now`, one hash
# counting what the job-changing scripts did in it, one HINCRBY each: submitted, done,
# failed, and the claims (a first attempt's in the bucket of its wait from submit, or
# run_at, to running: WAIT_BOUNDS; the others apart: started = their sum). The worker's
# promotion tick (upkeep.py PROMOTE_DUE, every second) samples the gauges: the minute keeps
# the last value it saw, off the request path. A minute's first write of a field sets its
# expiry: SERIES_RETENTION_SECS, which the API writes at start (2 days without it).
SERIES = f"""
local function expire_minute(key)
  redis.call("EXPIRE", key, tonumber(redis.call("GET", K.series_retention)) or 172800)
end

local function count_minute(now, field)
  local key = K.series(math.floor(tonumber(now) / 60))
  if redis.call("HINCRBY", key, field, 1) == 1 then expire_minute(key) end
  return key
end

local function sample_gauges(now)
  local key = K.series(math.floor(tonumber(now) / 60))
  local waiting = redis.call("ZCARD", K.status("pending")) + redis.call("ZCARD", K.delayed)
  local running = redis.call("ZCARD", K.status("running"))
  if redis.call("HSET", key, "waiting", waiting, "running", running) > 0 then
    expire_minute(key)
  end
end

-- Epoch seconds of an RFC 3339 UTC stamp as ours are written ("2026-01-02T03:04:05.678901Z",
-- to the millisecond), nil for any other length or zone: its digits read as bytes (one call,
-- no string made or parsed: a claim's cost), the date by Howard Hinnant's days_from_civil.
local function epoch_of(stamp)
  if type(stamp) ~= "string" or #stamp ~= 27 or string.byte(stamp, 27) ~= 90 then return nil end
  local y1, y2, y3, y4, _, m1, m2, _, d1, d2, _, h1, h2, _, i1, i2, _, s1, s2, _, f1, f2, f3 =
    string.byte(stamp, 1, 23)
  local mo = m1 * 10 + m2 - 528  -- each digit's byte is 48 more than it
  local y = y1 * 1000 + y2 * 100 + y3 * 10 + y4 - 53328 - (mo <= 2 and 1 or 0)
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((mo + 9) % 12) + 2) / 5) + d1 * 10 + d2 - 529
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return (days - 719468) * 86400 + (h1 * 10 + h2 - 528) * 3600 + (i1 * 10 + i2 - 528) * 60
    + s1 * 10 + s2 - 528 + (f1 * 100 + f2 * 10 + f3 - 5328) / 1000
end

-- A claim, one HINCRBY: a first attempt's wait in its bucket ("wait:<i>", i from 0); any
-- other claim (a retry's, or one whose times are not ours) in "started:other". The wait
-- runs from submit, or from run_at when later (a delayed job's); ours compare as text.
local function count_started(job, now)
  local from = job.created_at
  if type(job.run_at) == "string" and type(from) == "string" and job.run_at > from then
    from = job.run_at
  end
  local at = (job.retry_count or 0) == 0 and epoch_of(from)
  if not at then return count_minute(now, "started:other") end
  local wait, bounds, i = tonumber(now) - at, {{{", ".join(str(b) for b in WAIT_BOUNDS)}}}, 1
  while i <= #bounds and wait > bounds[i] do i = i + 1 end
  count_minute(now, ({{{", ".join(f'"wait:{i}"' for i in range(len(WAIT_BOUNDS) + 1))}}})[i])
end
"""

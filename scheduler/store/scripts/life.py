"""A job's life in Lua: the only code that moves a job between its indexes (LIFE), tries it
again (`requeue`), records each attempt as it ends (ATTEMPTS) and applies the node-loss rule
(NODE_LOSS); how a job ends is endings.py's (`finish`), which LIFE comes before and
NODE_LOSS after. Part of the scripts' library (library.py), which gives each script the
definitions it uses."""

from scheduler.models.attempt import ATTEMPT_TAIL_BYTES, ATTEMPTS_KEPT

# An attempt's end, kept apart from the record (models/attempt.py says what, and why): one
# JSON entry pushed on the job's attempts list, which keeps the last ATTEMPTS_KEPT. Called
# by finish and requeue only, before they change the job: its status says whether the
# attempt ran (running or cancelling: started at running_at; pending or delayed: never).
ATTEMPTS = f"""
-- The last ATTEMPT_TAIL_BYTES of the job's output `name` (stdout, stderr), from a character's
-- first byte (valid UTF-8 stays so). One stored apart (models/record.py) is read with
-- GETRANGE: the cost is the tail's, not the output's.
local function output_tail(id, job, name)
  local text = job[name] or ""
  if is_apart(job, name) then
    local key = K.job_output(id, name)
    local size = redis.call("STRLEN", key)
    text = redis.call("GETRANGE", key, math.max(0, size - {ATTEMPT_TAIL_BYTES}), -1)
    if size <= {ATTEMPT_TAIL_BYTES} then return text end
  elseif #text > {ATTEMPT_TAIL_BYTES} then
    text = string.sub(text, #text - {ATTEMPT_TAIL_BYTES} + 1)
  else
    return text
  end
  local first = 1
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
    local text = output_tail(id, job, name)
    if text ~= "" then
      out[#out + 1] = '"' .. name .. '":' .. cjson.encode(text)
    end
  end
  local key = K.attempts(id)
  local kept = redis.call("RPUSH", key, (string.gsub(table.concat(out, ",") .. "}}", "\\\\/", "/")))
  if kept > {ATTEMPTS_KEPT} then redis.call("LTRIM", key, -{ATTEMPTS_KEPT}, -1) end
end
"""

# A job's life: moving a job between its indexes is places.py's generated Lua (move_place),
# which these call; they add what a move means beyond its indexes (wake-ups, the placement
# pass's flag, an attempt's record).
LIFE = """
-- The changed job's head stored and marked for the next snapshot; returns what was stored.
local function store_job(id, job)
  local out = encode(job)
  redis.call("SET", K.job(id), out)
  redis.call("SADD", K.dirty, id)
  return out
end

-- The job's event, in the outbox (workers/tasks.py hands it to SNS); returns its number.
local function publish(id, status)
  local n = redis.call("INCR", K.event_seq)
  local message = '{"job_id":' .. cjson.encode(id) .. ',"status":"' .. status .. '"}'
  redis.call("RPUSH", K.outbox, n .. " " .. message)
  return n
end

-- Job `id` (number n) from its status on its node to status `new` on node `to`: its place
-- (places.py move_place; `at`, when the new place is scored by time: a delayed job's due
-- time), its pending_reason cleared once it is not unplaced. `to` "" with `new` pending:
-- unplaced (place.py), the next placement pass flagged. The caller stores the record.
local function rebind(id, n, job, new, to, at)
  move_place(id, n, job, new, to, at)
  if to == "" and new == "pending" then redis.call("SET", K.unplaced_retry, "-inf") end
  if to ~= "" or new ~= "pending" then job.pending_reason = nil end
  wake_job(id)
  if new == "pending" and to ~= "" then wake_node(to) end
end

-- The jobs that entered `index` (a sorted set scored by when) before `cutoff`, `batch` of
-- them while `pace` lasts (each its record's size, endings.py; the one to settle
-- ENDED_UNITS, which `settle` may spend more of): each leaves the index, and
-- `settle(id, n, job)` ends (or retries) one still `held` (the timeout sweep, the cancels
-- past their grace). Returns {entries read, the ids settled...}: fewer entries than `batch`
-- means the index holds no more expired ones (a call out of units says `batch`: call again).
local function settle_expired(index, cutoff, batch, held, settle, pace)
  local expired = redis.call("ZRANGEBYSCORE", index, "-inf", "(" .. cutoff, "LIMIT", 0, batch)
  local settled = {#expired}
  for _, id in ipairs(expired) do
    if pace.left <= 0 then
      settled[1] = tonumber(batch)
      break
    end
    redis.call("ZREM", index, id)
    local job, raw = load_job(id)
    pace.left = pace.left - VISIT_UNITS - (raw and record_units(#raw) or 0)
    if job and job.status == held then
      pace.left = pace.left - ENDED_UNITS
      settle(id, number_of(id), job)
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
  if counted then job.retry_count = (job.retry_count or 0) + 1 end
  job.exit_code, job.finished_at, job.failure_reason = nil, nil, nil
  set_output(id, job, "stdout", nil)
  if wait > 0 then
    local due = math.floor((now + wait) * 1000000 + 0.5) / 1000000  -- as run_at writes it
    job.run_at = rfc3339(due)
    rebind(id, n, job, "delayed", to, due)
  else
    rebind(id, n, job, "pending", to)
  end
  return store_job(id, job)
end

-- The jobs of `node` in `status` (pending; or waiting or delayed, which become pending
-- later) that are not instance-bound (they belong to their node and stay), in queue order,
-- each moved off it by `relocate(id, n, job)`, which rebinds it and answers its node ("":
-- none yet), or nil when it stays; until `moved` holds `limit` triples {id, from, to}, or
-- `pace` (endings.py; nil: none) is spent, each job moved charged ENDED_UNITS, its record's
-- size and its placing (the jobs that stay are not: a call moves one at least).
local function move_each(node, status, limit, moved, relocate, pace)
  local queue, skipped = K.node_status(node, status), 0
  while #moved < 3 * limit do
    local ids = redis.call("ZRANGE", queue, skipped, skipped + 99)
    if #ids == 0 then return end
    for _, id in ipairs(ids) do
      local job, raw = load_job(id)
      if not job or job.node_id ~= node or job.status ~= status then
        redis.call("ZREM", queue, id)  -- a stale entry: the job is not here in that status
      else
        local target = (job.instance_id or "") == ""
          and relocate(id, number_of(id), job) or nil
        if target == nil then
          skipped = skipped + 1  -- it stays
        else
          store_job(id, job)
          moved[#moved + 1], moved[#moved + 2], moved[#moved + 3] = id, node, target
          if pace then
            pace.left = pace.left - ENDED_UNITS - record_units(#raw) - placing_units(job)
          end
          if #moved >= 3 * limit or pace and pace.left <= 0 then return end
        end
      end
    end
  end
end

-- move_each to `live` nodes round-robin (a lost or deleted node's jobs, a new holder's),
-- keeping their number and priority (their place in the queue) and their status; one that
-- asks a fit waits unplaced for the next placement pass (place.py).
local function move_jobs(node, status, live, limit, moved, pace)
  if #live == 0 then return end
  move_each(node, status, limit, moved, function(id, n, job)
    local target = needs_fit(job) and "" or next_live(live)
    rebind(id, n, job, status, target)
    return target
  end, pace)
end

local function move_pending(node, live, limit, moved, pace)
  move_jobs(node, "pending", live, limit, moved, pace)
end
"""

# The node-loss rule, which ends jobs: after endings.py's SETTLE in the library.
NODE_LOSS = """
-- The running jobs of `node`, whose agent is gone (its node lost, or its id passed to a new
-- holder), under the node-loss rule (Nomad's lost allocations): a run job fails with stderr
-- "node lost" under the retry rule (`policy`: {max_retries, backoff, backoff_cap, seed}):
-- with retries left it is pending again (retry_count + 1, no event) on a `live` node (or
-- delayed there by its backoff), else it ends failed (exit -1, failure_reason node_lost,
-- its event). A service is placed again, pending on a live node (its retry count unchanged,
-- no event). An instance-bound job stays on its node, and with no live node a job waits
-- pending on its node. Until `out` holds `limit` quadruples {id, from, to, new status}, or
-- `pace` is spent (endings.py: a job ENDED_UNITS and its record's size; the endings share
-- it; nil: no bound, the endings one pace of their own).
local function lose_running(node, live, limit, out, now, stamp, policy, pace)
  local max_retries, backoff, backoff_cap, seed = unpack(policy)
  local room, metered = limit - #out / 4, pace ~= nil
  if room <= 0 then return end
  -- Each job handled leaves the node's running index, so the head is always the next one.
  local running = K.node_status(node, "running")
  for _, id in ipairs(redis.call("ZRANGE", running, 0, room - 1)) do
    if metered and pace.left <= 0 then return end
    local job, raw = load_job(id)
    if metered then pace.left = pace.left - ENDED_UNITS - (raw and record_units(#raw) or 0) end
    local n = redis.call("ZSCORE", K.all_jobs, id)
    if not job or job.status ~= "running" or not n then
      redis.call("SREM", K.node_busy(node), id)  -- a stale entry
      redis.call("ZREM", K.deadlines, id)
      redis.call("ZREM", running, id)
    else
      local service = job.job_type == "service"
      set_output(id, job, "stderr", "node lost")
      if service or retries_left(job, max_retries) then
        local target = node
        if (job.instance_id or "") == "" then
          target = needs_fit(job) and "" or next_live(live) or node
        end
        local wait = service and 0 or retry_wait(job, n, backoff, backoff_cap, seed)
        requeue(id, n, job, target, not service, wait, now, stamp, "node_lost")
      else
        job.exit_code = -1
        pace = pace or pace_of(SETTLE_UNITS)
        finish(id, n, job, "node_lost", now, stamp, pace)
      end
      out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, node, job.node_id, job.status
    end
  end
end
"""

--- @include "keys"
--- @include "ENDED_UNITS"
--- @include "VISIT_UNITS"
--- @include "encode"
--- @include "move_job"
--- @include "load_job"
--- @include "next_live"
--- @include "number_of"
--- @include "placed_by_fit"
--- @include "placing_units"
--- @include "record_attempt"
--- @include "record_units"
--- @include "rfc3339"
--- @include "set_output"
--- @include "wake_job"
--- @include "wake_node"

-- A job's life: what a move between its indexes means beyond them (`rebind`: wake-ups, the
-- placement pass's flag; the indexes are places.py's generated move_place), a job tried again
-- (`requeue`), a node's jobs moved off it (`move_each`); an attempt's end is recorded by
-- attempts.lua, how a job ends is settle.lua's (`finish`), which comes after this file, and
-- the node-loss rule (node_loss.lua) after that.

-- The changed job's head stored and marked for the next snapshot; returns what was stored.
local function store_job(id, job)
  local out = encode(job)
  redis.call("SET", K.job(id), out)
  redis.call("SADD", K.dirty, id)
  return out
end

-- The job's ending, in the outbox (workers/tasks.py hands it to SNS) under its event's
-- number `n` (events.lua move_job).
local function publish(id, status, n)
  local message = '{"job_id":' .. cjson.encode(id) .. ',"status":"' .. status .. '"}'
  redis.call("RPUSH", K.outbox, n .. " " .. message)
end

-- Job `id` (number n) from its status on its node to status `new` on node `to`: its place
-- (places.py move_place; `at`, when the new place is scored by time: a delayed job's due
-- time), its pending_reason cleared once it is not unplaced. `to` "" with `new` pending:
-- unplaced (place.lua), the next placement pass flagged. The caller stores the record.
local function rebind(id, n, job, new, to, at)
  if job.node_id ~= to then job.taken_from = nil end  -- steal.lua says so again after a theft
  move_job(id, n, job, new, to, at)
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
-- has not ended, so no outbox entry (its move is a job event, as every move); the attempt
-- that ended is recorded, `reason` (an ending's
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
-- asks a fit, or any while some node serves only some namespaces (room.lua placed_by_fit),
-- waits unplaced for the next placement pass (place.lua).
local function move_jobs(node, status, live, limit, moved, pace)
  if #live == 0 then return end
  move_each(node, status, limit, moved, function(id, n, job)
    local target = placed_by_fit(job) and "" or next_live(live)
    rebind(id, n, job, status, target)
    return target
  end, pace)
end

local function move_pending(node, live, limit, moved, pace)
  move_jobs(node, "pending", live, limit, moved, pace)
end

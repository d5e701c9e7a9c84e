--- @include "keys"
--- @include "ENDED_UNITS"
--- @include "SETTLE_UNITS"
--- @include "finish"
--- @include "load_job"
--- @include "next_live"
--- @include "pace_of"
--- @include "placed_by_fit"
--- @include "record_units"
--- @include "requeue"
--- @include "retries_left"
--- @include "retry_wait"
--- @include "set_output"

-- The node-loss rule, which ends jobs: after settle.lua in the library.

-- The running jobs of `node`, whose agent is gone (its node lost, or its id passed to a new
-- holder), under the node-loss rule (Nomad's lost allocations): a run job fails with stderr
-- "node lost" under the retry rule (`policy`: {max_retries, backoff, backoff_cap, seed}):
-- with retries left it is pending again (retry_count + 1, no outbox entry) on a `live` node
-- (or delayed there by its backoff; one placed by fit, room.lua placed_by_fit, unplaced for
-- the next placement pass), else it ends failed (exit -1, failure_reason node_lost,
-- its outbox entry). A service is placed again, pending on a live node (its retry count
-- unchanged, no outbox entry). Every move is a job event (events.lua). An instance-bound job
-- stays on its node, and with no live node a job waits pending on its node. Until `out`
-- holds `limit` quadruples {id, from, to, new status}, or `pace` is spent (endings.py: a job
-- ENDED_UNITS and its record's size; the endings share it; nil: no bound, the endings one
-- pace of their own).
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
          target = placed_by_fit(job) and "" or next_live(live) or node
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

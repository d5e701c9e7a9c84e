--- @include "codes"
--- @include "DEPENDENCY_UNITS"
--- @include "ENDED_UNITS"
--- @include "REASON"
--- @include "attempt_of"
--- @include "crowded_dependency"
--- @include "failed_dependency"
--- @include "forget_earlier_waits"
--- @include "load_job"
--- @include "needs_fit"
--- @include "number_of"
--- @include "pick_node"
--- @include "placing_units"
--- @include "rebind"
--- @include "record_units"
--- @include "sees"
--- @include "rfc3339"
--- @include "set_output"
--- @include "store_job"
--- @include "wait_for"

-- POST /jobs/{id}/retry and POST /jobs/retry (by the key named `by`, "" without keys: its
-- retried_by): each failed job of the `count` ids
-- that open `rest` (whatever failed it: its command, a timeout, a lost node, a cancel)
-- starts over: pending on a node placed as a new job is (place.lua pick_node; the candidates
-- are the rest of `rest`; an instance-bound job stays on its node; one no node takes now
-- waits unplaced with its pending_reason), its retry count, outputs and failure
-- cleared, out of the finished index. It has not ended, so no event. A job that runs after
-- others waits again for those not done (waiting), out of the unsettled endings of its
-- earlier wait (settle.lua forget_earlier_waits); while one of them is failed it stays
-- failed (BLOCKED: retry that one first, in the same call before it), and while one is
-- waited for by `max_waiters` jobs already (TOO_MANY), as a new job would be refused.
-- The ids are taken in order while `units` last (a job costs ENDED_UNITS, its record's size
-- and placing, and DEPENDENCY_UNITS a job it runs after: endings.py), the first one always:
-- the caller sends the others again (store/ops/jobs.py retry). Returns {id, code, the job's
-- head (OK), the failed job it runs after (BLOCKED), or ""} per id taken, code OK |
-- NOT_FOUND | NOT_FAILED | NO_NODES | BLOCKED | TOO_MANY. A job outside `namespaces`
-- (read.lua sees: its caller's) is NOT_FOUND, untouched.
local ids, candidates = {}, {}
for i, value in ipairs(rest) do
  if i <= tonumber(count) then ids[#ids + 1] = value else candidates[#candidates + 1] = value end
end
local out, cutoff, left = {}, tonumber(now) - tonumber(node_ttl), tonumber(units)
for _, id in ipairs(ids) do
  if left <= 0 then break end
  local job, raw = load_job(id)
  local code, stored = OK, ""
  left = left - ENDED_UNITS - (raw and record_units(#raw) + placing_units(job) or 0)
  if not job or not sees(namespaces, job.namespace) then
    code = NOT_FOUND
  elseif job.status ~= "failed" then
    code = NOT_FAILED
  else
    local after = job.after or {}
    left = left - DEPENDENCY_UNITS * #after
    local target, reason = job.node_id, nil
    if (job.instance_id or "") == "" then
      target, reason = pick_node(mode, candidates, job, cutoff)
    end
    local failed = failed_dependency(after)
    if failed then
      code, stored = BLOCKED, failed
    elseif crowded_dependency(after, max_waiters, id) then
      code = TOO_MANY
    elseif not target and (mode ~= "live" or reason == REASON.no_nodes and not needs_fit(job)) then
      code = NO_NODES
    else
      -- Its retries start over, its attempts' numbers go on: the earlier ones' ends and
      -- live output stay readable under their own numbers.
      job.earlier_attempts = attempt_of(job)
      job.retry_count = 0
      job.exit_code, job.failure_reason, job.cancelled_by = nil, nil, nil
      job.retried_by = by ~= "" and by or nil
      set_output(id, job, "stdout", nil)
      set_output(id, job, "stderr", nil)
      -- run_at: runnable from now, where the dashboard's wait to running counts from
      -- (series.lua count_started), not from its first submit.
      job.running_at, job.finished_at, job.run_at = nil, nil, rfc3339(tonumber(now))
      forget_earlier_waits(id, after)
      local status = wait_for(id, after) > 0 and "waiting" or "pending"
      if status == "waiting" and needs_fit(job) then target = "" end  -- placed when done
      rebind(id, number_of(id), job, status, target or "")
      if status == "pending" and not target then job.pending_reason = reason end
      stored = store_job(id, job)
    end
  end
  out[#out + 1], out[#out + 2], out[#out + 3] = id, code, stored
end
return out

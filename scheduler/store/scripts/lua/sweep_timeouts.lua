--- @include "keys"
--- @include "SETTLE_UNITS"
--- @include "finish"
--- @include "pace_of"
--- @include "requeue"
--- @include "retries_left"
--- @include "retry_node"
--- @include "retry_wait"
--- @include "set_output"
--- @include "settle_expired"

-- The running run-jobs that started before `cutoff` (strictly) timed out: exit -1, "job
-- timed out". One with a max_retries of its own and retries left is tried again (requeue,
-- after its backoff; on its node unless drained: drains.lua retry_node, builtin "1" with the
-- built-in registry); any other ends failed, failure_reason timed_out, with its event (the
-- original never retried a timeout). Reads only the expired entries of the deadlines,
-- `batch` of them; their waiters as far as one pace goes (endings.py), the rest left to
-- SETTLE_ENDINGS. Returns {number of entries read, ids of the jobs that timed out...}.
local pace = pace_of(SETTLE_UNITS)
local function timed_out(id, n, job)
  job.exit_code = -1
  set_output(id, job, "stderr", "job timed out")
  if job.max_retries and retries_left(job, max_retries) then
    local wait = retry_wait(job, n, backoff, backoff_cap, seed)
    local to = retry_node(job, builtin == "1", tonumber(now) - tonumber(node_ttl))
    requeue(id, n, job, to, true, wait, tonumber(now), stamp, "timed_out")
  else
    finish(id, n, job, "timed_out", now, stamp, pace)
  end
end
return settle_expired(K.deadlines, cutoff, batch, "running", timed_out, pace)

--- @include "keys"
--- @include "SETTLE_UNITS"
--- @include "finish"
--- @include "output_is"
--- @include "pace_of"
--- @include "set_output"
--- @include "settle_expired"

-- The cancelling jobs whose agent has not reported them cancelled within the grace (asked
-- before `cutoff`; the original agent cannot be told): ended now as cancelled (failed,
-- failure_reason cancelled), their node's slot free, their event; their waiters as
-- SWEEP_TIMEOUTS'. Returns {number of entries read, ids of the jobs it cancelled...}.
local pace = pace_of(SETTLE_UNITS)
local function unconfirmed(id, n, job)
  if output_is(job, "stderr", "", "") then
    local why = "cancelled: the agent did not confirm within CANCEL_GRACE_SECS"
    set_output(id, job, "stderr", why)
  end
  finish(id, n, job, "cancelled", now, stamp, pace)
end
return settle_expired(K.cancelling, cutoff, batch, "cancelling", unconfirmed, pace)

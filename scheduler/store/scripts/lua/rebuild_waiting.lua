--- @include "keys"
--- @include "DEPENDENCY_UNITS"
--- @include "VISIT_UNITS"
--- @include "finish"
--- @include "load_job"
--- @include "pace_of"
--- @include "record_units"
--- @include "release_waiter"
--- @include "set_output"
--- @include "store_job"
--- @include "wait_for"

-- After a restore (which writes records and indexes only): each waiting job's count and its
-- place among its dependencies' dependents, rebuilt from its `after` and the statuses now in
-- Redis (settle.lua wait_for): one whose dependency failed fails, one with nothing left to
-- wait for is pending. Up to `batch` waiting jobs numbered above `above`, while `units`
-- last (endings.py: its record's size, DEPENDENCY_UNITS a job it runs after; the endings
-- share them, the rest left to SETTLE_ENDINGS). Returns {1 when waiting jobs may be left,
-- the last number read}.
local entries = redis.call(
  "ZRANGEBYSCORE", K.status("waiting"), "(" .. above, "+inf", "WITHSCORES", "LIMIT", 0, batch)
local last, pace = above, pace_of(tonumber(units))
for i = 1, #entries, 2 do
  if pace.left <= 0 then return {1, last} end
  local id, n = entries[i], entries[i + 1]
  last = n
  local job, raw = load_job(id)
  if job and job.status == "waiting" then
    local after = job.after or {}
    pace.left = pace.left - VISIT_UNITS - DEPENDENCY_UNITS * #after - record_units(#raw)
    local waits, failed = wait_for(id, after)
    if failed then
      set_output(id, job, "stderr", "dependency " .. failed .. " ended failed")
      finish(id, n, job, "dependency_failed", now, stamp, pace)
    elseif waits == 0 then
      release_waiter(id, n, job, stamp)
      store_job(id, job)
    end
  end
end
return {#entries == 2 * tonumber(batch) and 1 or 0, last}

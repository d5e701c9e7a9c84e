--- @include "keys"
--- @include "ENDED_UNITS"
--- @include "SETTLE_UNITS"
--- @include "load_job"
--- @include "number_of"
--- @include "pace_of"
--- @include "place"
--- @include "placing_units"
--- @include "record_units"
--- @include "store_job"
--- @include "wake_freed"

-- A pass over the unplaced jobs (place.lua), only once room may have appeared: while
-- {P}:unplaced:retry is set (flag_unplaced, by the events that make room), `batch` of them
-- after the score it holds ("-inf": from the head), in queue order, each placed if a node
-- fits now (place.lua place: pending on it, its node woken) or its pending_reason brought up
-- to date (stored only when it changed), while one pace lasts (as PROMOTE_DUE's). The flag
-- then holds where the next call goes on, or is deleted at the end. Returns {entries read,
-- ids of the jobs placed...}; fewer entries than `batch`: the pass is over.
wake_freed()  -- jobs waiting for their namespace's quota that may fit now (admit.lua)
local from = redis.call("GET", K.unplaced_retry)
if not from then return {0} end
local entries = redis.call(
  "ZRANGEBYSCORE", K.unplaced, from, "+inf", "WITHSCORES", "LIMIT", 0, batch)
local placed, cutoff, failed = {#entries / 2}, tonumber(live_cutoff), {}
local pace, last = pace_of(SETTLE_UNITS), #entries
for i = 1, #entries, 2 do
  if pace.left <= 0 then
    placed[1], last = tonumber(batch), i - 1
    break
  end
  local id = entries[i]
  local job, raw = load_job(id)
  pace.left = pace.left - ENDED_UNITS - (raw and record_units(#raw) + placing_units(job) or 0)
  if job and job.status == "pending" and job.node_id == "" then
    local before = job.pending_reason
    -- An ask that found no node in this call is not looked for again (place's `failed`).
    local node = place(id, number_of(id), job, cutoff, failed)
    if node then placed[#placed + 1] = id end
    if node or job.pending_reason ~= before then store_job(id, job) end
  else
    redis.call("ZREM", K.unplaced, id)  -- a stale entry
  end
end
if last == #entries and #entries < 2 * tonumber(batch) then
  redis.call("DEL", K.unplaced_retry)
else
  redis.call("SET", K.unplaced_retry, "(" .. entries[last])
end
return placed

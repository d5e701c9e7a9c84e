--- @include "keys"
--- @include "ENDED_UNITS"
--- @include "SETTLE_UNITS"
--- @include "live_nodes"
--- @include "load_job"
--- @include "next_live"
--- @include "number_of"
--- @include "pace_of"
--- @include "place"
--- @include "placeable"
--- @include "placed_by_fit"
--- @include "placing_units"
--- @include "rebind"
--- @include "record_units"
--- @include "sample_gauges"
--- @include "store_job"

-- The delayed jobs due by `now`, `batch` of them, become pending: on their node while it is
-- live (heard from since `live_cutoff`: the built-in registry's heartbeats, or the sweep's
-- sightings of an external registry's nodes) and not drained, or bound to an instance, else
-- on a live node, round-robin. With no live node a job waits pending on its node
-- (REQUEUE_LOST moves it once one is). A job that asks a fit (or has no node, or any job
-- while some node serves only some namespaces: room.lua placed_by_fit) is placed as a new
-- one is (place.lua place): pending on a node that fits, or unplaced. While one pace
-- lasts (endings.py: ENDED_UNITS a job, its record's size and placing; out of it, entries
-- read says `batch`: call again). Then the dashboard's gauges of now's minute (series.lua
-- SERIES). Returns {entries read, ids of the jobs now pending...}.
local due = redis.call("ZRANGEBYSCORE", K.delayed, "-inf", now, "LIMIT", 0, batch)
local promoted, live, cutoff = {#due}, nil, tonumber(live_cutoff)
local pace = pace_of(SETTLE_UNITS)
for _, id in ipairs(due) do
  if pace.left <= 0 then
    promoted[1] = tonumber(batch)
    break
  end
  local job, raw = load_job(id)
  pace.left = pace.left - ENDED_UNITS - (raw and record_units(#raw) + placing_units(job) or 0)
  if not job or job.status ~= "delayed" then
    redis.call("ZREM", K.delayed, id)  -- a stale entry
  else
    local n, target = number_of(id), job.node_id
    if (job.instance_id or "") ~= "" then
      rebind(id, n, job, "pending", target)
    elseif placed_by_fit(job) or target == "" then
      place(id, n, job, cutoff)
    else
      if not placeable(target, cutoff) then
        live = live or live_nodes(cutoff)
        target = next_live(live) or target
      end
      rebind(id, n, job, "pending", target)
    end
    store_job(id, job)
    promoted[#promoted + 1] = id
  end
end
sample_gauges(now)
return promoted

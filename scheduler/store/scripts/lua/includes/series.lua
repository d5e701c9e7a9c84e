--- @include "keys"
--- @include "WAIT_BOUNDS"
--- @include "WAIT_FIELDS"

-- The dashboard's per-minute counts, written by the job-changing scripts; READ_SERIES
-- (series.py) reads them.

-- The dashboard's series (models/series.py, ui_dashboard.py): per minute of `now`, one hash
-- counting what the job-changing scripts did in it, one HINCRBY each: submitted, done,
-- failed, and the claims (a first attempt's in the bucket of its wait from submit, or
-- run_at, to running: WAIT_BOUNDS; the others apart: started = their sum). The worker's
-- promotion tick (upkeep.py PROMOTE_DUE, every second) samples the gauges: the minute keeps
-- the last value it saw, off the request path. A minute's first write of a field sets its
-- expiry: SERIES_RETENTION_SECS, which the API writes at start (2 days without it).

local function expire_minute(key)
  redis.call("EXPIRE", key, tonumber(redis.call("GET", K.series_retention)) or 172800)
end

local function count_minute(now, field)
  local key = K.series(string.format("%d", math.floor(tonumber(now) / 60)))
  if redis.call("HINCRBY", key, field, "1") == 1 then expire_minute(key) end
  return key
end

local function sample_gauges(now)
  local key = K.series(string.format("%d", math.floor(tonumber(now) / 60)))
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
  local wait, bounds, i = tonumber(now) - at, WAIT_BOUNDS, 1
  while i <= #bounds and wait > bounds[i] do i = i + 1 end
  count_minute(now, WAIT_FIELDS[i])
end

--- @include "keys"
--- @include "FINAL"
--- @include "SETTLE_UNITS"
--- @include "VISIT_UNITS"
--- @include "leave_place"
--- @include "load_job"
--- @include "pace_of"
--- @include "part_keys"
--- @include "record_units"

-- Retention: remove from Redis the finished jobs (done or failed) that finished before
-- `cutoff`, with every index entry, their attempts and live output, reading `batch` entries
-- after the `skip` that earlier calls of this sweep kept. Only jobs the snapshot already holds
-- in their final state go: a job in the changed set (or in a snapshot being written) stays
-- until a snapshot has committed it, so a pruned job is never lost, only moved out of Redis
-- to the SQLite file. While one pace lasts (endings.py: a job looked at and its record's
-- size; out of it, entries read says `batch`: call again). Returns {number of entries read,
-- number of entries kept, ids of the jobs removed...}.
local expired = redis.call("ZRANGEBYSCORE", K.finished, "-inf", "(" .. cutoff, "LIMIT", skip, batch)
local kept, removed, read, pace = 0, {}, #expired, pace_of(SETTLE_UNITS)
for _, id in ipairs(expired) do
  if pace.left <= 0 then
    read = tonumber(batch)
    break
  end
  local unwritten = redis.call("SISMEMBER", K.dirty, id) == 1
    or redis.call("SISMEMBER", K.dirty_inflight, id) == 1
  pace.left = pace.left - VISIT_UNITS
  if unwritten then
    kept = kept + 1
  else
    local job, raw = load_job(id)
    pace.left = pace.left - VISIT_UNITS - (raw and record_units(#raw) or 0)
    -- Only a final job is removed; an entry left stale (the job replaced by a restore) goes.
    if job and FINAL[job.status] then
      local keys = {K.attempts(id), K.job_log(id), K.job_log_state(id)}
      part_keys(id, keys)
      redis.call("DEL", unpack(keys))
      leave_place(id, job)
      -- A namespace its last job left is no longer in use (keys.py namespaces).
      local ns = job.namespace or ""
      if redis.call("EXISTS", K.namespace_jobs(ns)) == 0 then
        redis.call("SREM", K.namespaces, ns)
      end
      removed[#removed + 1] = id
    else
      redis.call("ZREM", K.finished, id)
    end
  end
end
return {read, kept, unpack(removed)}

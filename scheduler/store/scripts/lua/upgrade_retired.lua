--- @include "keys"
--- @include "ENDINGS"
--- @include "load_job"
--- @include "move_place"
--- @include "store_job"

-- Jobs an earlier version ended with `status`, a final status of its own then
-- (models.RETIRED_STATUSES), changed to how they end now, `ending` (ENDINGS): the status and
-- failure_reason, and its indexes. They keep their finish time, and had their event. `batch`
-- of them; returns how many entries it read (fewer than `batch`: none are left).
local index, new, reason = K.status(status), ENDINGS[ending][1], ENDINGS[ending][2]
local entries = redis.call("ZRANGE", index, 0, batch - 1, "WITHSCORES")
for i = 1, #entries, 2 do
  local id = entries[i]
  local job = load_job(id)
  if job and job.status == status then
    move_place(id, entries[i + 1], job, new, job.node_id)  -- finished, as it was
    if reason ~= "" then job.failure_reason = reason end
    store_job(id, job)
  else
    redis.call("ZREM", index, id)  -- a stale entry
  end
end
return #entries / 2

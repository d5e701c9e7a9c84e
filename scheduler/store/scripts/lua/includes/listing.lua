--- @include "keys"
--- @include "load_job"
--- @include "queue_score"

-- The ids of the index answering GET /jobs with these filters (each may be ""): LIST's page,
-- and the jobs the UI's search looks through (SEARCH). In job number order ("asc": numbers
-- above `bound`), or newest first ("desc": below `bound`, 0 from the newest). A node's pending
-- jobs are listed in its queue's order instead (places.py queue_score: higher priority first,
-- oldest first within one; "desc" from the back), from the place of job-`bound` in it (its
-- number and priority: priority 0 for a job not stored), so a page starts just after the
-- last job of the one before. At most `limit` ids. A schedule's jobs (`schedule` not "") are
-- its index's, by number: the API takes no node or status with it (no index per schedule and
-- status: every change of status would have to keep one).

local function listing_ids(node, status, schedule, bound, order, limit)
  local index = K.all_jobs
  if schedule ~= "" then
    index = K.schedule_jobs(schedule)
  elseif node ~= "" and status ~= "" then
    index = K.node_status(node, status)
  elseif node ~= "" then
    index = K.node_jobs(node)
  elseif status ~= "" then
    index = K.status(status)
  end
  local from = "(" .. bound
  if bound == "0" then
    from = order == "desc" and "+inf" or "-inf"
  elseif schedule == "" and node ~= "" and status == "pending" then
    local job = load_job("job-" .. bound)
    from = string.format("(%.17g", queue_score(tonumber(bound), job and job.priority))
  end
  if order == "desc" then
    return redis.call("ZREVRANGEBYSCORE", index, from, "-inf", "LIMIT", 0, limit)
  end
  return redis.call("ZRANGEBYSCORE", index, from, "+inf", "LIMIT", 0, limit)
end

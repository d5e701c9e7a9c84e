-- The new job stored in `status` and indexed (its record, its spec apart, every index its
-- status and node put it in, its idempotency key), its node woken.
local score = status == "pending" and queue_score(n, priority) or n
if status == "pending" and node == "" then  -- the last field (models.job): appended
  job = string.sub(job, 1, -2) .. ',"pending_reason":' .. cjson.encode(reason) .. "}"
end
redis.call("SET", K.job(id), job)
if spec_staged ~= "" then
  redis.call("RENAME", K.staged(spec_staged), K.job_spec(id))
  redis.call("PERSIST", K.job_spec(id))
end
redis.call("ZADD", K.all_jobs, n, id)
redis.call("ZADD", K.status(status), n, id)
if node ~= "" then
  redis.call("ZADD", K.node_jobs(node), n, id)
  redis.call("ZADD", K.node_status(node, status), score, id)
  if status == "pending" then hold(node, id, ask) end
elseif status == "pending" then
  redis.call("ZADD", K.unplaced, score, id)
end
if status == "delayed" then redis.call("ZADD", K.delayed, due, id) end
if schedule ~= "" then redis.call("ZADD", K.schedule_jobs(schedule), n, id) end
redis.call("SADD", K.dirty, id)
count_minute(now, "submitted")
if dedup then
  local value = fingerprint == "" and id or id .. " " .. fingerprint
  redis.call("SET", dedup, value, "EX", tonumber(dedup_ttl))
end
if status == "pending" and node ~= "" then wake_node(node) end

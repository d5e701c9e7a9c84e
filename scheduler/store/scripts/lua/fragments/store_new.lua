-- The new job stored in `status` and indexed (its record, its spec apart, every index its
-- status and node put it in, its idempotency key, its event), its node woken.
redis.call("SET", K.job(id), job)
if spec_staged ~= "" then
  redis.call("RENAME", K.staged(spec_staged), K.job_spec(id))
  redis.call("PERSIST", K.job_spec(id))
end
local where = {status = status, node_id = node, priority = priority, cpus = ask.cpus,
  memory_mb = ask.memory_mb, schedule = schedule, namespace = namespace}
enter_place(id, n, where, due, redis.call)
note_event(id, where, "", "")
-- /metrics counts each namespace in use; the default is always counted (a command less on
-- the usual create)
if namespace ~= "" then redis.call("SADD", K.namespaces, namespace) end
redis.call("SADD", K.dirty, id)
count_minute(now, "submitted")
if dedup then
  local value = fingerprint == "" and id or id .. " " .. fingerprint
  redis.call("SET", dedup, value, "EX", tonumber(dedup_ttl))
end
if status == "pending" and node ~= "" then wake_node(node) end

"""The scripts of the request path: create, place, poll, list and report jobs; register,
heartbeat and delete built-in registry nodes. Each header lists its KEYS and ARGV.
"""

from __future__ import annotations

from scheduler.store.lua import INDEX, PLACEMENT, READ, WAKE, script

CREATE_JOB = script(
    PLACEMENT,
    WAKE,
    """
-- KEYS[1] root  KEYS[2] seq:job  KEYS[3] seq:rr  KEYS[4] jobs  KEYS[5] dirty
-- KEYS[6] nodes:compute  KEYS[7] idempotency key (sqs:{msg}) or "" when none
-- KEYS[8] initialised (the restore marker)
-- ARGV[1] the job's JSON without job_id and node_id  ARGV[2] placement mode
-- ARGV[3] now (epoch s)  ARGV[4] node TTL (s)  ARGV[5] idempotency TTL (s)
-- ARGV[6..] candidate node ids (modes "fixed" and "list")
-- Returns {OK, job JSON} | {DUPLICATE, job JSON} | {NO_NODES} | {NOT_READY}
-- Publishes wake:node:{node}.
-- A Redis that came back empty must get its snapshot back before a new job takes an id the
-- snapshot already holds (snapshot.restore_if_empty sets the marker).
if redis.call("EXISTS", KEYS[8]) == 0 then return {NOT_READY} end
local dedup = KEYS[7]
if dedup ~= "" then
  local seen = redis.call("GET", dedup)
  if seen then return {DUPLICATE, redis.call("GET", key_job(seen)) or ""} end
end
local node = pick_node(ARGV[2], KEYS[3], KEYS[6], tonumber(ARGV[3]), tonumber(ARGV[4]), 6)
if not node then return {NO_NODES} end
local n = redis.call("INCR", KEYS[2])
local id = "job-" .. n
local job = '{"job_id":' .. cjson.encode(id) .. ',"node_id":' .. cjson.encode(node) .. ','
  .. string.sub(ARGV[1], 2)
redis.call("SET", key_job(id), job)
redis.call("ZADD", KEYS[4], n, id)
redis.call("ZADD", key_status("pending"), n, id)
redis.call("ZADD", key_node_jobs(node), n, id)
redis.call("ZADD", key_node_status(node, "pending"), n, id)
redis.call("SADD", KEYS[5], id)
if dedup ~= "" then redis.call("SET", dedup, id, "EX", tonumber(ARGV[5])) end
wake_node(node)
return {OK, job}
""",
)


PICK_NODE = script(
    PLACEMENT,
    """
-- KEYS[1] root  KEYS[2] seq:rr  KEYS[3] nodes:compute
-- ARGV[1] placement mode  ARGV[2] now (epoch s)  ARGV[3] node TTL (s)  ARGV[4..] candidates
-- Returns {OK, node id} | {NO_NODES}
local node = pick_node(ARGV[1], KEYS[2], KEYS[3], tonumber(ARGV[2]), tonumber(ARGV[3]), 4)
if not node then return {NO_NODES} end
return {OK, node}
""",
)


POLL = script(
    READ,
    """
-- The agent's poll: the node's oldest pending jobs, at most its free capacity.
-- KEYS[1] root  KEYS[2] node busy set  KEYS[3] node pending zset
-- ARGV[1] MAX_JOBS_PER_NODE
-- Returns a list of job JSON strings.
local free = tonumber(ARGV[1]) - redis.call("SCARD", KEYS[2])
if free <= 0 then return {} end
return get_jobs(redis.call("ZRANGE", KEYS[3], 0, free - 1), math.huge)
""",
)


LIST = script(
    READ,
    """
-- A page of an index, in job number order.
-- KEYS[1] root  KEYS[2] index zset
-- ARGV[1] list jobs with a number above this  ARGV[2] page size  ARGV[3] page byte budget
-- Returns a list of job JSON strings.
local ids = redis.call("ZRANGEBYSCORE", KEYS[2], "(" .. ARGV[1], "+inf", "LIMIT", 0, ARGV[2])
return get_jobs(ids, tonumber(ARGV[3]))
""",
)


TRANSITION = script(
    INDEX,
    WAKE,
    """
-- An agent's report (PATCH /jobs/{id}), under the state machine:
--   pending -> running; running -> done | failed; failed with retries left -> pending.
-- KEYS[1] root  KEYS[2] job  KEYS[3] jobs  KEYS[4] deadlines  KEYS[5] dirty  KEYS[6] outbox
-- KEYS[7] seq:event  KEYS[8] finished
-- ARGV[1] job id  ARGV[2] new status  ARGV[3] exit code ("" = none)  ARGV[4] stdout
-- ARGV[5] stderr  ARGV[6] now (epoch s)  ARGV[7] now (RFC 3339)  ARGV[8] MAX_JOB_RETRIES
-- Returns {OK, job JSON} | {NOT_FOUND} | {FINISHED} | {ALREADY_RUNNING} | {NOT_RUNNING}
-- Publishes wake:job:{id}, and wake:node:{node} when the job leaves running (room again,
-- or pending again after a retry).
local id, new = ARGV[1], ARGV[2]
local raw = redis.call("GET", KEYS[2])
if not raw then return {NOT_FOUND} end
local job = cjson.decode(raw)
local old = job.status
if old == "done" or old == "failed" then return {FINISHED} end
local n = redis.call("ZSCORE", KEYS[3], id)
local busy = key_node_busy(job.node_id)
if new == "running" then
  if old ~= "pending" then return {ALREADY_RUNNING} end
  job.running_at = ARGV[7]
  if job.job_type ~= "service" then
    redis.call("SADD", busy, id)
    redis.call("ZADD", KEYS[4], ARGV[6], id)
  end
elseif old ~= "running" then
  return {NOT_RUNNING}
else
  redis.call("SREM", busy, id)
  redis.call("ZREM", KEYS[4], id)
  if new == "failed" and (job.retry_count or 0) < tonumber(ARGV[8]) then
    job.retry_count = (job.retry_count or 0) + 1
    job.status, job.exit_code, job.stdout, job.finished_at = "pending", nil, nil, nil
    if ARGV[5] ~= "" then job.stderr = ARGV[5] end
    move(id, n, job.node_id, old, "pending")
    local out = encode(job)
    redis.call("SET", KEYS[2], out)
    redis.call("SADD", KEYS[5], id)
    wake_job(id)
    wake_node(job.node_id)
    return {OK, out}
  end
  job.finished_at = ARGV[7]
  redis.call("ZADD", KEYS[8], ARGV[6], id)
  publish(KEYS[6], KEYS[7], id, new)
  wake_node(job.node_id)
end
job.status = new
if ARGV[3] ~= "" then job.exit_code = tonumber(ARGV[3]) end
if ARGV[4] ~= "" then job.stdout = ARGV[4] end
if ARGV[5] ~= "" then job.stderr = ARGV[5] end
move(id, n, job.node_id, old, new)
local out = encode(job)
redis.call("SET", KEYS[2], out)
redis.call("SADD", KEYS[5], id)
wake_job(id)
return {OK, out}
""",
)


REGISTER_NODE = script(
    """
-- KEYS[1] root  KEYS[2] nodes hash  KEYS[3] nodes:seen  KEYS[4] nodes:compute
-- ARGV[1] node id  ARGV[2] node JSON  ARGV[3] role  ARGV[4] now (epoch s)
redis.call("HSET", KEYS[2], ARGV[1], ARGV[2])
redis.call("ZADD", KEYS[3], ARGV[4], ARGV[1])
if ARGV[3] == "compute" then
  redis.call("ZADD", KEYS[4], ARGV[4], ARGV[1])
else
  redis.call("ZREM", KEYS[4], ARGV[1])
end
return OK
""",
)


HEARTBEAT = script(
    """
-- KEYS[1] root  KEYS[2] nodes hash  KEYS[3] nodes:seen  KEYS[4] nodes:compute
-- ARGV[1] node id  ARGV[2] now (epoch s)
-- Returns {OK, node JSON} | {NOT_FOUND}
local node = redis.call("HGET", KEYS[2], ARGV[1])
if not node then return {NOT_FOUND} end
redis.call("ZADD", KEYS[3], ARGV[2], ARGV[1])
if redis.call("ZSCORE", KEYS[4], ARGV[1]) then redis.call("ZADD", KEYS[4], ARGV[2], ARGV[1]) end
return {OK, node}
""",
)


DELETE_NODE = script(
    """
-- KEYS[1] root  KEYS[2] nodes hash  KEYS[3] nodes:seen  KEYS[4] nodes:compute
-- ARGV[1] node id
-- Returns OK | NOT_FOUND
if redis.call("HDEL", KEYS[2], ARGV[1]) == 0 then return NOT_FOUND end
redis.call("ZREM", KEYS[3], ARGV[1])
redis.call("ZREM", KEYS[4], ARGV[1])
return OK
""",
)

# The outbox (workers/tasks.py flush_outbox).

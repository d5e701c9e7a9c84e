"""The scripts of the request path: create, place, poll, list, report and cancel jobs (the
built-in registry's are in node_scripts.py). Each header lists its KEYS and ARGV.
"""

from __future__ import annotations

from scheduler.store.lua import CALLER, INDEX, PLACEMENT, READ, WAKE, script

CREATE_JOB = script(
    PLACEMENT,
    WAKE,
    """
-- KEYS[1] root  KEYS[2] seq:job  KEYS[3] seq:rr  KEYS[4] jobs  KEYS[5] dirty
-- KEYS[6] nodes:compute  KEYS[7] idempotency key (sqs:{msg}; sqs: when none, as every key
-- must be in the deployment's cluster slot)
-- KEYS[8] initialised (the restore marker)
-- ARGV[1] the job's JSON without job_id and node_id  ARGV[2] placement mode
-- ARGV[3] now (epoch s)  ARGV[4] node TTL (s)  ARGV[5] idempotency TTL (s), 0: no key
-- ARGV[6..] candidate node ids (modes "fixed" and "list")
-- Returns {OK, job JSON} | {DUPLICATE, job JSON} | {NO_NODES} | {NOT_READY}
-- Publishes wake:node:{node}.
-- A Redis that came back empty must get its snapshot back before a new job takes an id the
-- snapshot already holds (snapshot.restore_if_empty sets the marker).
if redis.call("EXISTS", KEYS[8]) == 0 then return {NOT_READY} end
local dedup = tonumber(ARGV[5]) > 0 and KEYS[7]
if dedup then
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
if dedup then redis.call("SET", dedup, id, "EX", tonumber(ARGV[5])) end
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
    CALLER,
    """
-- The agent's poll: the node's oldest pending jobs, at most its free capacity, and the ids
-- of its jobs being cancelled (the API sends them in a header the original agent ignores).
-- KEYS[1] root  KEYS[2] node busy set  KEYS[3] node pending zset  KEYS[4] tokens
-- KEYS[5] node cancelling zset
-- ARGV[1] MAX_JOBS_PER_NODE  ARGV[2] node id  ARGV[3] caller (lua.CALLER)
-- Returns {OK, {cancelling id, ...}, job JSON, ...} | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(KEYS[4], ARGV[3], ARGV[2])
if access ~= OK then return {access} end
local cancels = redis.call("ZRANGE", KEYS[5], 0, 99)
local free = tonumber(ARGV[1]) - redis.call("SCARD", KEYS[2])
if free <= 0 then return {OK, cancels} end
local jobs = get_jobs(redis.call("ZRANGE", KEYS[3], 0, free - 1), math.huge)
table.insert(jobs, 1, cancels)
table.insert(jobs, 1, OK)
return jobs
""",
)


LIST = script(
    READ,
    """
-- A page of an index, in job number order ("asc"), or newest first ("desc").
-- KEYS[1] root  KEYS[2] index zset
-- ARGV[1] asc: list jobs with a number above this; desc: below this (0: from the newest)
-- ARGV[2] page size  ARGV[3] page byte budget  ARGV[4] "asc" | "desc"
-- Returns a list of job JSON strings.
local ids
if ARGV[4] == "desc" then
  local top = ARGV[1] == "0" and "+inf" or "(" .. ARGV[1]
  ids = redis.call("ZREVRANGEBYSCORE", KEYS[2], top, "-inf", "LIMIT", 0, ARGV[2])
else
  ids = redis.call("ZRANGEBYSCORE", KEYS[2], "(" .. ARGV[1], "+inf", "LIMIT", 0, ARGV[2])
end
return get_jobs(ids, tonumber(ARGV[3]))
""",
)


TRANSITION = script(
    INDEX,
    CALLER,
    WAKE,
    """
-- An agent's report (PATCH /jobs/{id}), under the state machine:
--   pending -> running; running -> done | failed; failed with retries left -> pending;
--   cancelling -> cancelled (the agent killed it: nothing else is taken from a cancelling job).
-- KEYS[1] root  KEYS[2] job  KEYS[3] jobs  KEYS[4] deadlines  KEYS[5] dirty  KEYS[6] outbox
-- KEYS[7] seq:event  KEYS[8] finished  KEYS[9] tokens  KEYS[10] cancelling
-- ARGV[1] job id  ARGV[2] new status  ARGV[3] exit code ("" = none)  ARGV[4] stdout
-- ARGV[5] stderr  ARGV[6] now (epoch s)  ARGV[7] now (RFC 3339)  ARGV[8] MAX_JOB_RETRIES
-- ARGV[9] caller (lua.CALLER)
-- ARGV[10] the reporting node as the body names it ("" = unknown, as the Rust agent's reports)
-- Returns {OK, job JSON} | {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN} | {FINISHED}
--   | {ALREADY_RUNNING} | {NOT_RUNNING} | {OTHER_NODE} | {CANCELLING} | {NOT_CANCELLING}
-- Repeats whose first answer was lost change nothing and answer the job: a claim by the node
-- holding the job (only a known node: a bare claim stays a conflict), and a final report
-- that the stored job already reflects. A node token names its node as well as the body.
-- Publishes wake:job:{id}, and wake:node:{node} when the job leaves running (room again,
-- or pending again after a retry).
local id, new, caller, reporter = ARGV[1], ARGV[2], ARGV[9], ARGV[10]
local raw = redis.call("GET", KEYS[2])
if not raw then return {NOT_FOUND} end
local job = cjson.decode(raw)
local access = node_access(KEYS[9], caller, job.node_id)
if access ~= OK then return {access} end
if reporter == "" and caller ~= "open" and caller ~= "key" then reporter = job.node_id end
local old = job.status
if reporter ~= "" and reporter ~= job.node_id then return {OTHER_NODE} end
if FINAL[old] then
  local function same(arg, stored) return arg == "" or arg == stored end
  if new == old and (ARGV[3] == "" or tonumber(ARGV[3]) == job.exit_code)
    and same(ARGV[4], job.stdout) and same(ARGV[5], job.stderr) then
    return {OK, raw}
  end
  return {FINISHED}
end
if old == "cancelling" then
  if new ~= "cancelled" then return {CANCELLING} end
elseif new == "cancelled" then
  return {NOT_CANCELLING}
end
local n = redis.call("ZSCORE", KEYS[3], id)
local busy = key_node_busy(job.node_id)
if new == "running" then
  if old == "running" and reporter ~= "" then return {OK, raw} end
  if old ~= "pending" then return {ALREADY_RUNNING} end
  job.running_at = ARGV[7]
  if job.job_type ~= "service" then
    redis.call("SADD", busy, id)
    redis.call("ZADD", KEYS[4], ARGV[6], id)
  end
elseif old ~= "running" and old ~= "cancelling" then
  return {NOT_RUNNING}
else
  redis.call("SREM", busy, id)
  redis.call("ZREM", KEYS[4], id)
  redis.call("ZREM", KEYS[10], id)
  if new == "failed" and (job.retry_count or 0) < tonumber(ARGV[8]) then
    job.retry_count = (job.retry_count or 0) + 1
    job.status, job.exit_code, job.stdout, job.finished_at = "pending", nil, nil, nil
    if ARGV[5] ~= "" then job.stderr = ARGV[5] end
    move(id, n, job.node_id, old, "pending")
    local out = store_job(KEYS[2], KEYS[5], id, job)
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
local out = store_job(KEYS[2], KEYS[5], id, job)
wake_job(id)
return {OK, out}
""",
)


CANCEL_JOB = script(
    INDEX,
    WAKE,
    """
-- DELETE /jobs/{id}. A pending job is cancelled at once: it leaves its queue, an event is
-- published. A running one becomes cancelling: it keeps its node's slot, its timeout no longer
-- applies, and its agent learns it (the poll's X-Cancel-Jobs, the heartbeat's answer), kills it
-- and reports cancelled; an agent that cannot be told (the original) gets 409 on its late
-- report, and the sweep cancels the job CANCEL_GRACE_SECS later (FINISH_CANCELS).
-- KEYS[1] root  KEYS[2] job  KEYS[3] jobs  KEYS[4] deadlines  KEYS[5] dirty  KEYS[6] outbox
-- KEYS[7] seq:event  KEYS[8] finished  KEYS[9] cancelling
-- ARGV[1] job id  ARGV[2] now (epoch s)  ARGV[3] now (RFC 3339)
-- Returns {OK, job JSON} (a cancelling job: as it is) | {NOT_FOUND} | {FINISHED}
-- Publishes wake:job:{id}, and wake:node:{node} for a running one (its long-poll hears it).
local id = ARGV[1]
local raw = redis.call("GET", KEYS[2])
if not raw then return {NOT_FOUND} end
local job = cjson.decode(raw)
local old = job.status
if FINAL[old] then return {FINISHED} end
if old == "cancelling" then return {OK, raw} end
local n = redis.call("ZSCORE", KEYS[3], id)
if old == "pending" then
  job.status, job.finished_at = "cancelled", ARGV[3]
  move(id, n, job.node_id, old, "cancelled")
  redis.call("ZADD", KEYS[8], ARGV[2], id)
  publish(KEYS[6], KEYS[7], id, "cancelled")
else
  job.status = "cancelling"
  move(id, n, job.node_id, old, "cancelling")
  redis.call("ZREM", KEYS[4], id)
  redis.call("ZADD", KEYS[9], ARGV[2], id)
  wake_node(job.node_id)
end
local out = store_job(KEYS[2], KEYS[5], id, job)
wake_job(id)
return {OK, out}
""",
)


CHECK_REPORT = script(
    CALLER,
    """
-- Before the body of an agent's report is read (PATCH /jobs/{id} with a large or unsized
-- body): the job exists and this caller may report on it. Reads only; TRANSITION checks again.
-- KEYS[1] root  KEYS[2] job  KEYS[3] tokens
-- ARGV[1] caller (lua.CALLER)
-- Returns OK | NOT_FOUND | UNAUTHORIZED | FORBIDDEN
local raw = redis.call("GET", KEYS[2])
if not raw then return NOT_FOUND end
if ARGV[1] == "open" or ARGV[1] == "key" then return OK end
return node_access(KEYS[3], ARGV[1], cjson.decode(raw).node_id)
""",
)

"""The scripts of the request path: create, place, poll, list and report jobs; register,
heartbeat and delete built-in registry nodes. Each header lists its KEYS and ARGV.
"""

from __future__ import annotations

from scheduler.store.lua import CALLER, INDEX, PLACEMENT, READ, REBIND, WAKE, script

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
if old == "done" or old == "failed" or old == "cancelled" then
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
if old == "done" or old == "failed" or old == "cancelled" then return {FINISHED} end
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


# The built-in registry (REGISTRY_URL unset). Every node script takes the same KEYS:
# KEYS[1] root  KEYS[2] nodes hash  KEYS[3] nodes:seen  KEYS[4] nodes:compute
# KEYS[5] nodes:token (node id -> its token's hash)  KEYS[6] tokens (token hash -> node id)

REGISTER_NODE = script(
    """
-- POST /nodes/register. Who may (README, "Security"): a new id, anyone, or with ARGV[7] only
-- the key or the join key (caller "join"); an existing id, the operator's key or the node's
-- own token; otherwise, with AGENT_AUTH=open, anyone but without changing the node's role;
-- with AGENT_AUTH=token, only for a node silent for NODE_TTL_SECS, and with ARGV[7] only the
-- join key.
-- ARGV[1] node id  ARGV[2] node JSON  ARGV[3] role  ARGV[4] now (epoch s)
-- ARGV[5] caller (lua.CALLER, never "open")  ARGV[6] AGENT_AUTH ("open" | "token")
-- ARGV[7] "1": only the key and the join key add nodes (token mode with a key)
-- ARGV[8] the hash of a fresh token  ARGV[9] MAX_NODES  ARGV[10] NODE_TTL_SECS
-- Returns {OK, "issued" | "kept" | "none"} (the fresh token became the node's; the caller's
-- token stays the node's; no token for this caller) | {UNAUTHORIZED} | {TOO_MANY_NODES}
-- | {ROLE_LOCKED}
local id, caller, now = ARGV[1], ARGV[5], tonumber(ARGV[4])
local stored = redis.call("HGET", KEYS[2], id)
local held = redis.call("HGET", KEYS[5], id)
local function save()
  redis.call("HSET", KEYS[2], id, ARGV[2])
  redis.call("ZADD", KEYS[3], now, id)
  if ARGV[3] == "compute" then
    redis.call("ZADD", KEYS[4], now, id)
  else
    redis.call("ZREM", KEYS[4], id)
  end
end
local function issue()
  if held then redis.call("HDEL", KEYS[6], held) end
  redis.call("HSET", KEYS[5], id, ARGV[8])
  redis.call("HSET", KEYS[6], ARGV[8], id)
  return {OK, "issued"}
end
if caller == "key" then
  save()
  return issue()
end
if held and caller == held then
  save()
  return {OK, "kept"}
end
local joining = ARGV[7] ~= "1" or caller == "join"
if not stored then
  if not joining then return {UNAUTHORIZED} end
  if redis.call("HLEN", KEYS[2]) >= tonumber(ARGV[9]) then return {TOO_MANY_NODES} end
  save()
  return issue()
end
if ARGV[6] == "token" then
  local seen = tonumber(redis.call("ZSCORE", KEYS[3], id) or "-inf")
  if not joining or seen >= now - tonumber(ARGV[10]) then return {UNAUTHORIZED} end
  save()
  return issue()
end
if cjson.decode(stored).role ~= ARGV[3] then return {ROLE_LOCKED} end
save()
return {OK, "none"}
""",
)


HEARTBEAT = script(
    CALLER,
    """
-- KEYS[7] the node's cancelling zset
-- ARGV[1] node id  ARGV[2] now (epoch s)  ARGV[3] caller (lua.CALLER)
-- Returns {OK, node JSON, {cancelling id, ...}} | {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(KEYS[6], ARGV[3], ARGV[1])
if access ~= OK then return {access} end
local node = redis.call("HGET", KEYS[2], ARGV[1])
if not node then return {NOT_FOUND} end
redis.call("ZADD", KEYS[3], ARGV[2], ARGV[1])
if redis.call("ZSCORE", KEYS[4], ARGV[1]) then redis.call("ZADD", KEYS[4], ARGV[2], ARGV[1]) end
return {OK, node, redis.call("ZRANGE", KEYS[7], 0, 99)}
""",
)


DELETE_NODE = script(
    INDEX,
    WAKE,
    REBIND,
    CALLER,
    """
-- A node leaves (its agent stopping cleanly, or the operator's key): no job is placed on it
-- from now on, its token stops working at once, and its pending jobs (not instance-bound)
-- move to live nodes at once. A compute node stays in nodes:compute as lost long ago (score
-- 0), so the sweep treats it as a lost node: its running jobs (none after a clean stop) and
-- any pending jobs beyond `limit` follow.
-- KEYS[1..6] as above  KEYS[7] seq:rr  KEYS[8] dirty  KEYS[9] jobs
-- ARGV[1] node id  ARGV[2] live cutoff (epoch s)  ARGV[3] most jobs to move
-- ARGV[4] caller (lua.CALLER: "key", or the node's own token)
-- Returns {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
--   | {OK, job id, from node, to node, ...} for each job moved.
local node = ARGV[1]
local access = node_access(KEYS[6], ARGV[4], node)
if access ~= OK then return {access} end
local held = redis.call("HGET", KEYS[5], node)
if held then redis.call("HDEL", KEYS[6], held) end
redis.call("HDEL", KEYS[5], node)
if redis.call("HDEL", KEYS[2], node) == 0 then return {NOT_FOUND} end
redis.call("ZREM", KEYS[3], node)
local moved = {}
if redis.call("ZSCORE", KEYS[4], node) then
  redis.call("ZADD", KEYS[4], 0, node)
  local live = live_nodes(KEYS[4], ARGV[2])
  move_pending(node, live, KEYS[7], KEYS[8], KEYS[9], tonumber(ARGV[3]), moved)
end
return {OK, unpack(moved)}
""",
)


OVERVIEW = script(
    """
-- What the web UI's nodes page shows, read in one round trip: every node (the built-in
-- registry's, and those the sweep saw in an external one), each with its pending and running
-- jobs, the jobs by status, the background counters and the outbox length.
-- KEYS[1] root  KEYS[2] nodes hash  KEYS[3] nodes:seen  KEYS[4] nodes:compute  KEYS[5] stats
-- KEYS[6] outbox
-- ARGV[1..] the job statuses to count
-- Returns {nodes hash (flat), last heartbeats (flat), {id, pending, running, ...},
--   {status, count, ...}, stats hash (flat), outbox length}
local nodes = redis.call("HGETALL", KEYS[2])
local seen = redis.call("ZRANGE", KEYS[3], 0, -1, "WITHSCORES")
local ids, known = {}, {}
for i = 1, #nodes, 2 do ids[#ids + 1] = nodes[i]; known[nodes[i]] = true end
for _, id in ipairs(redis.call("ZRANGE", KEYS[4], 0, -1)) do
  if not known[id] then ids[#ids + 1] = id; known[id] = true end
end
local counts = {}
for _, id in ipairs(ids) do
  counts[#counts + 1] = id
  counts[#counts + 1] = redis.call("ZCARD", key_node_status(id, "pending"))
  counts[#counts + 1] = redis.call("ZCARD", key_node_status(id, "running"))
end
local by_status = {}
for _, status in ipairs(ARGV) do
  by_status[#by_status + 1] = status
  by_status[#by_status + 1] = redis.call("ZCARD", key_status(status))
end
return {nodes, seen, counts, by_status, redis.call("HGETALL", KEYS[5]), redis.call("LLEN", KEYS[6])}
""",
)


# Services (built-in registry): what the Rust agent registers for each service job it runs,
# and reads back to learn which to stop (CONTRACT 3.4, 3.5). Same KEYS for all three:
# KEYS[1] root  KEYS[2] services hash  KEYS[3] seq:service  KEYS[4] tokens
# KEYS[5] the node's services zset (node:{node}:services), or "" when no node is named

CREATE_SERVICE = script(
    CALLER,
    """
-- A node keeps at most ARGV[5] services: past it, its oldest one that is not running goes.
-- ARGV[1] node id  ARGV[2] the service's JSON, starting {"id":"",  ARGV[3] caller
-- ARGV[4] most services kept in all  ARGV[5] most a node keeps
-- Returns {OK, service JSON} | {UNAUTHORIZED} | {FORBIDDEN} | {TOO_MANY_NODES}
local access = node_access(KEYS[4], ARGV[3], ARGV[1])
if access ~= OK then return {access} end
if redis.call("ZCARD", KEYS[5]) >= tonumber(ARGV[5]) then
  local evicted = false
  for _, old in ipairs(redis.call("ZRANGE", KEYS[5], 0, -1)) do
    local kept = redis.call("HGET", KEYS[2], old)
    if not kept or cjson.decode(kept).status ~= "running" then
      redis.call("HDEL", KEYS[2], old)
      redis.call("ZREM", KEYS[5], old)
      evicted = true
      break
    end
  end
  if not evicted then return {TOO_MANY_NODES} end
end
if redis.call("HLEN", KEYS[2]) >= tonumber(ARGV[4]) then return {TOO_MANY_NODES} end
local n = redis.call("INCR", KEYS[3])
local id = "svc-" .. n
local service = '{"id":"' .. id .. '"' .. string.sub(ARGV[2], 9)
redis.call("HSET", KEYS[2], id, service)
redis.call("ZADD", KEYS[5], n, id)
return {OK, service}
""",
)


SET_SERVICE_STATUS = script(
    CALLER,
    """
-- PATCH /services/{id} (the agent, on its service's exit) or DELETE (the operator: stopped).
-- ARGV[1] service id  ARGV[2] new status (a plain word, models.SERVICE_STATUS_RE)
-- ARGV[3] caller
-- Returns OK | NOT_FOUND | UNAUTHORIZED | FORBIDDEN
local service = redis.call("HGET", KEYS[2], ARGV[1])
if not service then return NOT_FOUND end
local access = node_access(KEYS[4], ARGV[3], cjson.decode(service).node_id)
if access ~= OK then return access end
local updated = string.gsub(service, '"status":"[%w_%-]*"', '"status":"' .. ARGV[2] .. '"', 1)
redis.call("HSET", KEYS[2], ARGV[1], updated)
return OK
""",
)


LIST_SERVICES = script(
    CALLER,
    """
-- GET /services?node_id=&status= (either filter optional), in id order. A node's list reads
-- only its own services (its zset); the operator's list without a node reads them all.
-- ARGV[1] node id or ""  ARGV[2] status or ""  ARGV[3] caller (checked when ARGV[1] is set)
-- Returns {OK, service JSON, ...} | {UNAUTHORIZED} | {FORBIDDEN}
local blobs = {}
if ARGV[1] ~= "" then
  local access = node_access(KEYS[4], ARGV[3], ARGV[1])
  if access ~= OK then return {access} end
  local ids = redis.call("ZRANGE", KEYS[5], 0, -1)
  if #ids > 0 then blobs = redis.call("HMGET", KEYS[2], unpack(ids)) end
else
  local all = redis.call("HGETALL", KEYS[2])
  local found = {}
  for i = 1, #all, 2 do found[#found + 1] = {tonumber(string.sub(all[i], 5)), all[i + 1]} end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  for _, entry in ipairs(found) do blobs[#blobs + 1] = entry[2] end
end
local out = {OK}
for _, blob in ipairs(blobs) do
  if blob and (ARGV[2] == "" or cjson.decode(blob).status == ARGV[2]) then
    out[#out + 1] = blob
  end
end
return out
""",
)

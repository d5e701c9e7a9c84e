"""The Lua scripts: every state change of a job or node is one of these, atomic and one round
trip. KEYS[1] is always the key root (`Keys.root`); keys that depend on a value only known
inside the script (a job id from INCR, the node a job is bound to) are derived from it by the
`key_*` functions generated in keys.py. Every other key is passed in KEYS.

Return codes are turned into exceptions by the typed wrappers in store.py.
"""

from __future__ import annotations

from scheduler.keys import LUA_KEY_FUNCTIONS

# Return codes shared by the scripts and store.py.
OK = 1
NOT_FOUND = 0
DUPLICATE = 2
FINISHED = 3
ALREADY_RUNNING = 4
NOT_RUNNING = 5
NO_NODES = 6
NOT_READY = 7

_CODES = f"""
local OK, NOT_FOUND, DUPLICATE, FINISHED = {OK}, {NOT_FOUND}, {DUPLICATE}, {FINISHED}
local ALREADY_RUNNING, NOT_RUNNING, NO_NODES = {ALREADY_RUNNING}, {NOT_RUNNING}, {NO_NODES}
local NOT_READY = {NOT_READY}
"""

# Placement, the same rule as placement.choose: candidates sorted by id, ticket from INCR.
# mode "fixed": ARGV holds the one node (instance-bound, no ticket); "list": ARGV holds the
# sorted healthy nodes of an external registry; "live": the built-in registry's compute nodes
# heard from within the TTL.
_PLACEMENT = """
local function pick_node(mode, rr_key, compute_key, now, ttl, argv_from)
  local candidates
  if mode == "live" then
    candidates = redis.call("ZRANGEBYSCORE", compute_key, now - ttl, "+inf")
    table.sort(candidates)
  else
    candidates = {}
    for i = argv_from, #ARGV do candidates[#candidates + 1] = ARGV[i] end
  end
  if #candidates == 0 then return nil end
  if mode == "fixed" then return candidates[1] end
  local ticket = redis.call("INCR", rr_key)
  return candidates[((ticket - 1) % #candidates) + 1]
end
"""

# MGET in chunks: Lua's unpack() fails beyond a few thousand values (a 10 000-job page).
# A page also stops once it holds `budget` bytes (at least one job): 10 000 jobs with outputs
# near OUTPUT_LIMIT_BYTES would otherwise build gigabytes in Redis and in the API process.
_READ = """
local function get_jobs(ids, budget)
  local out, size = {}, 0
  for i = 1, #ids, 100 do
    local chunk = {}
    for j = i, math.min(i + 99, #ids) do chunk[#chunk + 1] = key_job(ids[j]) end
    for _, job in ipairs(redis.call("MGET", unpack(chunk))) do
      if job then
        size = size + #job
        if size > budget and #out > 0 then return out end
        out[#out + 1] = job
      end
    end
  end
  return out
end
"""

_INDEX = """
local function move(id, score, node, from, to)
  redis.call("ZREM", key_status(from), id)
  redis.call("ZADD", key_status(to), score, id)
  redis.call("ZREM", key_node_status(node, from), id)
  redis.call("ZADD", key_node_status(node, to), score, id)
end

-- cjson escapes "/" as "\\/"; Go does not, and since cjson escapes every "/", undoing it is exact.
local function encode(job)
  return (string.gsub(cjson.encode(job), "\\\\/", "/"))
end

local function publish(outbox_key, event_seq_key, id, status)
  local n = redis.call("INCR", event_seq_key)
  local message = '{"job_id":' .. cjson.encode(id) .. ',"status":"' .. status .. '"}'
  redis.call("RPUSH", outbox_key, n .. " " .. message)
end
"""


def _script(*parts: str) -> str:
    return "\n".join((LUA_KEY_FUNCTIONS, _CODES, *parts))


CREATE_JOB = _script(
    _PLACEMENT,
    """
-- KEYS[1] root  KEYS[2] seq:job  KEYS[3] seq:rr  KEYS[4] jobs  KEYS[5] dirty
-- KEYS[6] nodes:compute  KEYS[7] idempotency key (sqs:{msg}) or "" when none
-- KEYS[8] initialised (the restore marker)
-- ARGV[1] the job's JSON without job_id and node_id  ARGV[2] placement mode
-- ARGV[3] now (epoch s)  ARGV[4] node TTL (s)  ARGV[5] idempotency TTL (s)
-- ARGV[6..] candidate node ids (modes "fixed" and "list")
-- Returns {OK, job JSON} | {DUPLICATE, job JSON} | {NO_NODES} | {NOT_READY}
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
return {OK, job}
""",
)

PICK_NODE = _script(
    _PLACEMENT,
    """
-- KEYS[1] root  KEYS[2] seq:rr  KEYS[3] nodes:compute
-- ARGV[1] placement mode  ARGV[2] now (epoch s)  ARGV[3] node TTL (s)  ARGV[4..] candidates
-- Returns {OK, node id} | {NO_NODES}
local node = pick_node(ARGV[1], KEYS[2], KEYS[3], tonumber(ARGV[2]), tonumber(ARGV[3]), 4)
if not node then return {NO_NODES} end
return {OK, node}
""",
)

POLL = _script(
    _READ,
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

LIST = _script(
    _READ,
    """
-- A page of an index, in job number order.
-- KEYS[1] root  KEYS[2] index zset
-- ARGV[1] list jobs with a number above this  ARGV[2] page size  ARGV[3] page byte budget
-- Returns a list of job JSON strings.
local ids = redis.call("ZRANGEBYSCORE", KEYS[2], "(" .. ARGV[1], "+inf", "LIMIT", 0, ARGV[2])
return get_jobs(ids, tonumber(ARGV[3]))
""",
)

TRANSITION = _script(
    _INDEX,
    """
-- An agent's report (PATCH /jobs/{id}), under the state machine:
--   pending -> running; running -> done | failed; failed with retries left -> pending.
-- KEYS[1] root  KEYS[2] job  KEYS[3] jobs  KEYS[4] deadlines  KEYS[5] dirty  KEYS[6] outbox
-- KEYS[7] seq:event  KEYS[8] finished
-- ARGV[1] job id  ARGV[2] new status  ARGV[3] exit code ("" = none)  ARGV[4] stdout
-- ARGV[5] stderr  ARGV[6] now (epoch s)  ARGV[7] now (RFC 3339)  ARGV[8] MAX_JOB_RETRIES
-- Returns {OK, job JSON} | {NOT_FOUND} | {FINISHED} | {ALREADY_RUNNING} | {NOT_RUNNING}
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
    redis.call("SET", KEYS[2], encode(job))
    redis.call("SADD", KEYS[5], id)
    return {OK, redis.call("GET", KEYS[2])}
  end
  job.finished_at = ARGV[7]
  redis.call("ZADD", KEYS[8], ARGV[6], id)
  publish(KEYS[6], KEYS[7], id, new)
end
job.status = new
if ARGV[3] ~= "" then job.exit_code = tonumber(ARGV[3]) end
if ARGV[4] ~= "" then job.stdout = ARGV[4] end
if ARGV[5] ~= "" then job.stderr = ARGV[5] end
move(id, n, job.node_id, old, new)
local out = encode(job)
redis.call("SET", KEYS[2], out)
redis.call("SADD", KEYS[5], id)
return {OK, out}
""",
)

REQUEUE_LOST = _script(
    _INDEX,
    """
-- Move the pending jobs of lost nodes (built-in registry: not heard from since the lost
-- cutoff) to live ones, round-robin, keeping their place in the queue (score N). Running jobs
-- stay: the timeout sweep handles them. Instance-bound jobs stay: they belong to their node.
-- KEYS[1] root  KEYS[2] nodes:compute  KEYS[3] seq:rr  KEYS[4] dirty  KEYS[5] jobs
-- ARGV[1] lost cutoff (epoch s)  ARGV[2] live cutoff (epoch s)  ARGV[3] most jobs to move
-- Returns {job id, from node, to node, ...} for each job moved.
local lost = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[1])
if #lost == 0 then return {} end
local live = redis.call("ZRANGEBYSCORE", KEYS[2], ARGV[2], "+inf")
if #live == 0 then return {} end
table.sort(live)
local limit, moved = tonumber(ARGV[3]), {}
for _, node in ipairs(lost) do
  local queue, skipped = key_node_status(node, "pending"), 0
  while #moved < 3 * limit do
    local ids = redis.call("ZRANGE", queue, skipped, skipped + 99)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      local raw = redis.call("GET", key_job(id))
      local job = raw and cjson.decode(raw)
      if not job or (job.instance_id or "") ~= "" then
        skipped = skipped + 1
      else
        local ticket = redis.call("INCR", KEYS[3])
        local target = live[((ticket - 1) % #live) + 1]
        local n = redis.call("ZSCORE", KEYS[5], id)
        redis.call("ZREM", queue, id)
        redis.call("ZREM", key_node_jobs(node), id)
        redis.call("ZADD", key_node_status(target, "pending"), n, id)
        redis.call("ZADD", key_node_jobs(target), n, id)
        job.node_id = target
        redis.call("SET", key_job(id), encode(job))
        redis.call("SADD", KEYS[4], id)
        moved[#moved + 1], moved[#moved + 2], moved[#moved + 3] = id, node, target
        if #moved >= 3 * limit then return moved end
      end
    end
  end
end
return moved
""",
)

SWEEP_TIMEOUTS = _script(
    _INDEX,
    """
-- Fail the running run-jobs that started before the cutoff (no retry, `failed` event).
-- KEYS[1] root  KEYS[2] deadlines  KEYS[3] dirty  KEYS[4] outbox  KEYS[5] seq:event
-- KEYS[6] jobs  KEYS[7] finished
-- ARGV[1] cutoff (epoch s; started strictly before it = timed out)  ARGV[2] now (RFC 3339)
-- ARGV[3] batch size  ARGV[4] now (epoch s)
-- Returns {number of entries read, ids of the jobs it failed...}.
local ids = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[1], "LIMIT", 0, ARGV[3])
local failed = {#ids}
for _, id in ipairs(ids) do
  redis.call("ZREM", KEYS[2], id)
  local raw = redis.call("GET", key_job(id))
  if raw then
    local job = cjson.decode(raw)
    if job.status == "running" then
      job.status, job.exit_code, job.finished_at = "failed", -1, ARGV[2]
      job.stderr = "job timed out"
      redis.call("SREM", key_node_busy(job.node_id), id)
      move(id, redis.call("ZSCORE", KEYS[6], id), job.node_id, "running", "failed")
      redis.call("SET", key_job(id), encode(job))
      redis.call("SADD", KEYS[3], id)
      redis.call("ZADD", KEYS[7], ARGV[4], id)
      publish(KEYS[4], KEYS[5], id, "failed")
      failed[#failed + 1] = id
    end
  end
end
return failed
""",
)

PRUNE_FINISHED = _script(
    """
-- Retention: remove from Redis the done and failed jobs that finished before the cutoff, with
-- every index entry. Only jobs the snapshot already holds in their final state go: a job in
-- the changed set (or in a snapshot being written) stays until a snapshot has committed it,
-- so a pruned job is never lost, only moved out of Redis to the SQLite file.
-- KEYS[1] root  KEYS[2] finished  KEYS[3] jobs  KEYS[4] dirty  KEYS[5] dirty in-flight
-- ARGV[1] cutoff (epoch s; finished strictly before it)  ARGV[2] entries to skip (kept by
-- earlier calls of this sweep)  ARGV[3] batch size
-- Returns {number of entries read, number of entries kept, ids of the jobs removed...}.
local ids = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[1], "LIMIT", ARGV[2], ARGV[3])
local kept, removed = 0, {}
for _, id in ipairs(ids) do
  if redis.call("SISMEMBER", KEYS[4], id) == 1 or redis.call("SISMEMBER", KEYS[5], id) == 1 then
    kept = kept + 1
  else
    local raw = redis.call("GET", key_job(id))
    local job = raw and cjson.decode(raw)
    -- Only a final job is removed; an entry left stale (the job replaced by a restore) goes.
    if job and (job.status == "done" or job.status == "failed") then
      redis.call("DEL", key_job(id))
      redis.call("ZREM", KEYS[3], id)
      redis.call("ZREM", key_status(job.status), id)
      redis.call("ZREM", key_node_jobs(job.node_id), id)
      redis.call("ZREM", key_node_status(job.node_id, job.status), id)
      removed[#removed + 1] = id
    end
    redis.call("ZREM", KEYS[2], id)
  end
end
return {#ids, kept, unpack(removed)}
""",
)

REGISTER_NODE = _script(
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

HEARTBEAT = _script(
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

DELETE_NODE = _script(
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

TRIM_OUTBOX = _script(
    """
-- Remove from the head of the outbox the entries a flush has handed to rq, and only those:
-- a concurrent flush that read the same head has already removed them, and then this
-- removes nothing (the head no longer matches), so no entry is dropped unhanded.
-- KEYS[1] root  KEYS[2] outbox
-- ARGV[1..] the entries handed over, in list order
-- Returns the number of entries removed.
local removed = 0
for i = 1, #ARGV do
  if redis.call("LINDEX", KEYS[2], 0) ~= ARGV[i] then break end
  redis.call("LPOP", KEYS[2])
  removed = removed + 1
end
return removed
""",
)

# The SQLite snapshot and the restore from it (scheduler/snapshot.py).

TAKE_DIRTY = _script(
    """
-- Start a snapshot: move the jobs changed since the last one into the in-flight set, which
-- keeps them until the snapshot writing them has committed. A set left by a crashed snapshot
-- is folded in, so its changes are written by this one.
-- KEYS[1] root  KEYS[2] dirty  KEYS[3] dirty in-flight
-- Returns the number of jobs in flight.
if redis.call("EXISTS", KEYS[2]) == 1 then
  if redis.call("EXISTS", KEYS[3]) == 1 then
    redis.call("SUNIONSTORE", KEYS[3], KEYS[3], KEYS[2])
    redis.call("DEL", KEYS[2])
  else
    redis.call("RENAME", KEYS[2], KEYS[3])
  end
end
return redis.call("SCARD", KEYS[3])
""",
)

RESTORE_JOBS = _script(
    """
-- Put jobs back as the snapshot holds them, with every index their status needs (as the
-- scripts above maintain them). A job already present is first taken out of its old indexes.
-- KEYS[1] root  KEYS[2] jobs  KEYS[3] deadlines  KEYS[4] dirty  KEYS[5] finished
-- ARGV[1] "1" to mark the jobs changed (the next snapshot writes them), else "0"
-- ARGV[2..] 7 values per job: id, score, node id, status, start time (epoch s) of a running
--   run-job or "", finish time (epoch s) of a done or failed job or "", job JSON.
--   At most 1000 jobs per call (Lua's unpack limit).
-- Returns the number of jobs restored.
-- Each index gets one ZADD/SADD for the whole batch: far cheaper than one call per job.
local function unindex(id, raw)
  local ok, old = pcall(cjson.decode, raw)
  if not ok or type(old) ~= "table" then return end
  local node, status = old.node_id, old.status
  if type(node) ~= "string" or type(status) ~= "string" then return end
  redis.call("ZREM", key_status(status), id)
  redis.call("ZREM", key_node_status(node, status), id)
  redis.call("ZREM", key_node_jobs(node), id)
  redis.call("SREM", key_node_busy(node), id)
end
local function push(groups, key, a, b)
  local list = groups[key]
  if not list then list = {}; groups[key] = list end
  list[#list + 1] = a
  if b then list[#list + 1] = b end
end
local ids, job_keys = {}, {}
for i = 2, #ARGV, 7 do
  ids[#ids + 1] = ARGV[i]
  job_keys[#job_keys + 1] = key_job(ARGV[i])
end
if #ids == 0 then return 0 end
for i, old in ipairs(redis.call("MGET", unpack(job_keys))) do
  if old then
    unindex(ids[i], old)
    redis.call("ZREM", KEYS[3], ids[i])
    redis.call("ZREM", KEYS[5], ids[i])
  end
end
local records, zadds, sadds = {}, {}, {}
for j, id in ipairs(ids) do
  local i = 2 + (j - 1) * 7
  local score, node, status, start = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local finish = ARGV[i + 5]
  records[#records + 1] = job_keys[j]
  records[#records + 1] = ARGV[i + 6]
  push(zadds, KEYS[2], score, id)
  push(zadds, key_status(status), score, id)
  push(zadds, key_node_jobs(node), score, id)
  push(zadds, key_node_status(node, status), score, id)
  if start ~= "" then
    push(zadds, KEYS[3], start, id)
    push(sadds, key_node_busy(node), id)
  end
  if finish ~= "" then push(zadds, KEYS[5], finish, id) end
  if ARGV[1] == "1" then push(sadds, KEYS[4], id) end
end
redis.call("MSET", unpack(records))
for key, list in pairs(zadds) do redis.call("ZADD", key, unpack(list)) end
for key, list in pairs(sadds) do redis.call("SADD", key, unpack(list)) end
return #ids
""",
)

FINISH_RESTORE = _script(
    """
-- End the start-up decision (restored, or nothing to restore): raise the id counter to the
-- highest job number restored (never lower it), set the marker, clear the in-progress flag.
-- KEYS[1] root  KEYS[2] seq:job  KEYS[3] initialised  KEYS[4] restoring
-- ARGV[1] highest job number restored ("0" when none)  ARGV[2] marker text
local current = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
if tonumber(ARGV[1]) > current then redis.call("SET", KEYS[2], ARGV[1]) end
redis.call("SET", KEYS[3], ARGV[2])
redis.call("DEL", KEYS[4])
return OK
""",
)

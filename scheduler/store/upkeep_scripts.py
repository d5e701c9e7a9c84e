"""The scripts of the background work: timeout sweep, pruning, moving the jobs of lost
nodes, the event outbox, the snapshot's dirty set and the restore. Each header lists its KEYS
and ARGV.
"""

from __future__ import annotations

from scheduler.store.lua import INDEX, REBIND, WAKE, script

REQUEUE_LOST = script(
    INDEX,
    WAKE,
    REBIND,
    """
-- Move the pending jobs of lost nodes (built-in registry: not heard from since the lost
-- cutoff) to live ones, round-robin, keeping their place in the queue (score N). Running jobs
-- are LOSE_RUNNING's. Instance-bound jobs stay: they belong to their node.
-- KEYS[1] root  KEYS[2] nodes:compute  KEYS[3] seq:rr  KEYS[4] dirty  KEYS[5] jobs
-- ARGV[1] lost cutoff (epoch s)  ARGV[2] live cutoff (epoch s)  ARGV[3] most jobs to move
-- Returns {job id, from node, to node, ...} for each job moved.
-- Publishes wake:node:{to node} and wake:job:{id} for each.
local lost = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[1])
if #lost == 0 then return {} end
local live = live_nodes(KEYS[2], ARGV[2])
local limit, moved = tonumber(ARGV[3]), {}
for _, node in ipairs(lost) do
  move_pending(node, live, KEYS[3], KEYS[4], KEYS[5], limit, moved)
  if #moved >= 3 * limit then break end
end
return moved
""",
)


LOSE_RUNNING = script(
    INDEX,
    WAKE,
    REBIND,
    """
-- The running jobs of lost nodes: the agent is gone, and what it ran with it (Nomad's lost
-- allocations). A run job fails with stderr "node lost" under the retry rule: with retries
-- left it is pending again (retry_count + 1) on a live node, else failed for good (exit -1).
-- A service is placed again, pending on a live node (its retry count unchanged). An
-- instance-bound job stays on its node. With no live node, a job waits pending on its node
-- (REQUEUE_LOST moves it once one is live). One event each, with the job's new status.
-- KEYS[1] root  KEYS[2] nodes:compute  KEYS[3] seq:rr  KEYS[4] dirty  KEYS[5] jobs
-- KEYS[6] deadlines  KEYS[7] outbox  KEYS[8] seq:event  KEYS[9] finished
-- ARGV[1] lost cutoff (epoch s)  ARGV[2] live cutoff (epoch s)  ARGV[3] most jobs
-- ARGV[4] now (epoch s)  ARGV[5] now (RFC 3339)  ARGV[6] MAX_JOB_RETRIES
-- Returns {job id, from node, to node, new status, ...} for each job.
local lost = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[1])
if #lost == 0 then return {} end
local live = live_nodes(KEYS[2], ARGV[2])
local limit, out = tonumber(ARGV[3]), {}
for _, node in ipairs(lost) do
  -- Each job handled leaves the node's running index, so the head is always the next one.
  local ids = redis.call("ZRANGE", key_node_status(node, "running"), 0, limit - #out / 4 - 1)
  for _, id in ipairs(ids) do
    local raw = redis.call("GET", key_job(id))
    local job = raw and cjson.decode(raw)
    local n = redis.call("ZSCORE", KEYS[5], id)
    redis.call("SREM", key_node_busy(node), id)
    redis.call("ZREM", KEYS[6], id)
    if not job or job.status ~= "running" or not n then
      redis.call("ZREM", key_node_status(node, "running"), id)  -- a stale entry
    else
      local service = job.job_type == "service"
      job.stderr = "node lost"
      if service or (job.retry_count or 0) < tonumber(ARGV[6]) then
        if not service then job.retry_count = (job.retry_count or 0) + 1 end
        local target = node
        if (job.instance_id or "") == "" then target = next_live(live, KEYS[3]) or node end
        job.exit_code, job.stdout, job.finished_at = nil, nil, nil
        rebind(id, n, job, "running", "pending", target)
      else
        job.exit_code, job.finished_at = -1, ARGV[5]
        rebind(id, n, job, "running", "failed", node)
        redis.call("ZADD", KEYS[9], ARGV[4], id)
      end
      store_job(key_job(id), KEYS[4], id, job)
      publish(KEYS[7], KEYS[8], id, job.status)
      out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, node, job.node_id, job.status
    end
  end
  if #out >= 4 * limit then break end
end
return out
""",
)


SWEEP_TIMEOUTS = script(
    INDEX,
    WAKE,
    """
-- Fail the running run-jobs that started before the cutoff (no retry, `failed` event).
-- KEYS[1] root  KEYS[2] deadlines  KEYS[3] dirty  KEYS[4] outbox  KEYS[5] seq:event
-- KEYS[6] jobs  KEYS[7] finished
-- ARGV[1] cutoff (epoch s; started strictly before it = timed out)  ARGV[2] now (RFC 3339)
-- ARGV[3] batch size  ARGV[4] now (epoch s)
-- Returns {number of entries read, ids of the jobs it failed...}.
-- Publishes wake:job:{id} and wake:node:{node} (room again) for each.
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
      store_job(key_job(id), KEYS[3], id, job)
      redis.call("ZADD", KEYS[7], ARGV[4], id)
      publish(KEYS[4], KEYS[5], id, "failed")
      wake_job(id)
      wake_node(job.node_id)
      failed[#failed + 1] = id
    end
  end
end
return failed
""",
)


PRUNE_FINISHED = script(
    """
-- Retention: remove from Redis the finished jobs (done, failed, cancelled) that finished
-- before the cutoff, with every index entry. Only jobs the snapshot already holds in their
-- final state go: a job in the changed set (or in a snapshot being written) stays until a
-- snapshot has committed it, so a pruned job is never lost, only moved out of Redis to the
-- SQLite file.
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
    if job and FINAL[job.status] then
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


FINISH_CANCELS = script(
    INDEX,
    WAKE,
    """
-- The cancelling jobs whose agent has not reported them cancelled within the grace (the
-- original agent cannot be told): cancelled now, their node's slot free, one event each.
-- KEYS[1] root  KEYS[2] cancelling  KEYS[3] jobs  KEYS[4] dirty  KEYS[5] outbox
-- KEYS[6] seq:event  KEYS[7] finished
-- ARGV[1] cutoff (epoch s: asked before it = past the grace)  ARGV[2] now (epoch s)
-- ARGV[3] now (RFC 3339)  ARGV[4] batch size
-- Returns {number of entries read, ids of the jobs it cancelled...}.
local ids = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[1], "LIMIT", 0, ARGV[4])
local done = {#ids}
for _, id in ipairs(ids) do
  redis.call("ZREM", KEYS[2], id)
  local raw = redis.call("GET", key_job(id))
  local job = raw and cjson.decode(raw)
  if job and job.status == "cancelling" then
    job.status, job.finished_at = "cancelled", ARGV[3]
    if (job.stderr or "") == "" then
      job.stderr = "cancelled: the agent did not confirm within CANCEL_GRACE_SECS"
    end
    redis.call("SREM", key_node_busy(job.node_id), id)
    move(id, redis.call("ZSCORE", KEYS[3], id), job.node_id, "cancelling", "cancelled")
    store_job(key_job(id), KEYS[4], id, job)
    redis.call("ZADD", KEYS[7], ARGV[2], id)
    publish(KEYS[5], KEYS[6], id, "cancelled")
    wake_job(id)
    wake_node(job.node_id)
    done[#done + 1] = id
  end
end
return done
""",
)


# The outbox (workers/tasks.py flush_outbox).
TRIM_OUTBOX = script(
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

# The SQLite snapshot and the restore from it (scheduler/snapshot/).


TAKE_DIRTY = script(
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


RESTORE_JOBS = script(
    """
-- Put jobs back as the snapshot holds them, with every index their status needs (as the
-- scripts above maintain them). A job already present is first taken out of its old indexes.
-- KEYS[1] root  KEYS[2] jobs  KEYS[3] deadlines  KEYS[4] dirty  KEYS[5] finished
-- KEYS[6] cancelling (a cancelling job is restored as asked long ago: the next sweep ends it)
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
    redis.call("ZREM", KEYS[6], ids[i])
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
  if status == "cancelling" then push(zadds, KEYS[6], 0, id) end
  if ARGV[1] == "1" then push(sadds, KEYS[4], id) end
end
redis.call("MSET", unpack(records))
for key, list in pairs(zadds) do redis.call("ZADD", key, unpack(list)) end
for key, list in pairs(sadds) do redis.call("SADD", key, unpack(list)) end
return #ids
""",
)


FINISH_RESTORE = script(
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

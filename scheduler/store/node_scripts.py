"""The built-in registry's scripts (REGISTRY_URL unset): nodes register, heartbeat and
leave; their services; the overview the UI and /metrics read. Each header lists its KEYS and
ARGV.
"""

from __future__ import annotations

from scheduler.store.lua import CALLER, INDEX, REBIND, WAKE, script

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

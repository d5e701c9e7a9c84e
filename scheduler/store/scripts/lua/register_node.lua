--- @include "codes"
--- @include "keys"
--- @include "ENDED_UNITS"
--- @include "NAMESPACE_LABEL"
--- @include "SETTLE_UNITS"
--- @include "index_node"
--- @include "lift_drain"
--- @include "live_nodes"
--- @include "lose_running"
--- @include "move_each"
--- @include "move_jobs"
--- @include "pace_of"
--- @include "rebind"
--- @include "record_units"
--- @include "serves"

-- POST /nodes/register. Who may (docs/SECURITY.md): a new id, anyone, or with key_required
-- only the key or the join key (caller "join"); an existing id, the operator's key or the
-- node's own token; otherwise, with AGENT_AUTH=open, anyone but without changing the node's
-- role; with AGENT_AUTH=token, no one, but with neither key set (anyone may add a node) anyone
-- once the node is silent for NODE_TTL_SECS. caller is never "open"; token_hash: a fresh
-- token's. An existing id given a fresh token passes to a new holder (hand_over). A compute
-- node's labels, offer (cpu_count, memory_mb) and load are indexed from its record for
-- placement (room.lua index_node), and the unplaced jobs may fit it. vouches: "1" when the
-- operator vouches for this registration (vouches()): only a node in nodes:vouched has its
-- hostname as its node.hostname label; the node's own token keeps what was vouched for
-- while it says the hostname the key registered (a node's token claiming another host's name
-- would take the jobs pinned there), anyone else's registration is not vouched for. A node
-- labelled anew for some namespaces (room.lua serves) sheds what is queued on it of the
-- others (shed_unserved).
-- Returns {OK, "issued" | "kept" | "none", {job moved}, {job lost}} (the fresh token became
-- the node's; the caller's token stays the node's; no token for this caller) | {UNAUTHORIZED}
-- | {TOO_MANY_NODES} | {ROLE_LOCKED} | {TOO_MANY}
local stored = redis.call("HGET", K.nodes, node)
local held = redis.call("HGET", K.node_tokens, node)
local seen_at = tonumber(now)
local moved, lost = {}, {}
-- Labelled anew for some namespaces (its `namespace` label other than its record `old`
-- said): its queued jobs (pending, waiting, delayed; not instance-bound) of a namespace it
-- no longer serves go back to placement, keeping their status (unplaced, or placed when
-- released or due), up to `limit` and one pace (life.lua move_each); any beyond stay. Its
-- running jobs run on.
local function shed_unserved(old)
  local before = old and cjson.decode(old).labels
  before = type(before) == "table" and before[NAMESPACE_LABEL] or false
  local served = redis.call("HGET", K.nodes_namespaces, node)
  if not served or served == before then return end
  local pace = pace_of(SETTLE_UNITS)
  for _, status in ipairs({"pending", "waiting", "delayed"}) do
    move_each(node, status, tonumber(limit), moved, function(id, n, job)
      if serves(node, job.namespace) then return nil end
      rebind(id, n, job, status, "")
      return ""
    end, pace)
  end
end
local function save(kept)
  -- Registered again: a drain of its own clean stop is over; an operator's stays.
  if redis.call("HGET", K.drained_nodes, node) == "stopping" then lift_drain(node) end
  if vouches == "1" then
    redis.call("SADD", K.nodes_vouched, node)
  elseif not kept or not stored
      or cjson.decode(stored).hostname ~= cjson.decode(record).hostname then
    redis.call("SREM", K.nodes_vouched, node)
  end
  redis.call("HSET", K.nodes, node, record)
  -- A new agent may not name its claims (steal.lua): its queue is noted again by its polls.
  redis.call("ZREM", K.backlog, node)
  redis.call("ZADD", K.nodes_seen, seen_at, node)
  if role == "compute" then
    redis.call("ZADD", K.nodes_compute, seen_at, node)
  else
    redis.call("ZREM", K.nodes_compute, node)
  end
  index_node(node, stored, record)
  shed_unserved(stored)
end
local function issue()
  if held then redis.call("HDEL", K.tokens, held) end
  redis.call("HSET", K.node_tokens, node, token_hash)
  redis.call("HSET", K.tokens, token_hash, node)
  save(false)
  return {OK, "issued", moved, lost}
end
-- The id passes to a new holder: what was queued for the old one goes back to placement, as
-- when a node is lost: its pending, waiting and delayed jobs to the other live nodes, its
-- running ones under the node-loss rule. With no other live node they stay, as they would go
-- to the next node up. Returns TOO_MANY, changing nothing, past `limit` jobs or past one
-- pace of work (SETTLE_UNITS, about 5 ms: a job's flat cost and its record's size, read
-- with STRLEN before anything moves): all or nothing, and no script holds Redis longer.
local function hand_over()
  if not stored or not redis.call("ZSCORE", K.nodes_compute, node) then return nil end
  local statuses, count, units = {"pending", "waiting", "delayed", "running"}, 0, 0
  for _, status in ipairs(statuses) do
    count = count + redis.call("ZCARD", K.node_status(node, status))
  end
  if count > tonumber(limit) then return TOO_MANY end
  for _, status in ipairs(statuses) do
    for _, id in ipairs(redis.call("ZRANGE", K.node_status(node, status), 0, -1)) do
      units = units + ENDED_UNITS + record_units(redis.call("STRLEN", K.job(id)))
    end
  end
  if units > SETTLE_UNITS then return TOO_MANY end
  local live = {}
  for _, other in ipairs(live_nodes(seen_at - tonumber(node_ttl))) do
    if other ~= node then live[#live + 1] = other end
  end
  for i = 1, 3 do move_jobs(node, statuses[i], live, tonumber(limit), moved) end
  local policy = {max_retries, backoff, backoff_cap, seed}
  lose_running(node, live, tonumber(limit), lost, seen_at, stamp, policy)
  return nil
end
if caller == "key" then
  local refused = hand_over()
  if refused then return {refused} end
  return issue()
end
if held and caller == held then
  save(true)
  return {OK, "kept", moved, lost}
end
local joining = key_required ~= "1" or caller == "join"
if not stored then
  if not joining then return {UNAUTHORIZED} end
  if redis.call("HLEN", K.nodes) >= tonumber(max_nodes) then return {TOO_MANY_NODES} end
  return issue()
end
if agent_auth == "token" then
  local seen = tonumber(redis.call("ZSCORE", K.nodes_seen, node) or "-inf")
  if key_required == "1" or seen >= seen_at - tonumber(node_ttl) then return {UNAUTHORIZED} end
  local refused = hand_over()
  if refused then return {refused} end
  return issue()
end
if cjson.decode(stored).role ~= role then return {ROLE_LOCKED} end
save(false)
return {OK, "none", moved, lost}

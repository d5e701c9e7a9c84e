--- @include "keys"
--- @include "DEFAULT_NAMESPACE"
--- @include "NAMESPACE_JOIN"
--- @include "NAMESPACE_LABEL"

-- What a node offers and holds: the part of placement (place.lua) that a job's life
-- (life.lua) uses, so it comes before it in the library: whether a node is drained
-- (`is_drained`, `undrained`: the one check), the live nodes and the round-robin moves, `hold`
-- and `unhold` (every bind and unbind of a job), a node's place among the placeable ones
-- (`refresh_load`), its labels and offer (`index_node`), and the flag that room may have
-- appeared (`flag_unplaced`).

-- A drained node (drains.lua, docs/GUIDE.md, "Drain") is never a candidate.
local function is_drained(node)
  return redis.call("HEXISTS", K.drained_nodes, node) == 1
end

-- `nodes` without the drained ones (one EXISTS when none is, the usual case).
local function undrained(nodes)
  if #nodes == 0 or redis.call("EXISTS", K.drained_nodes) == 0 then return nodes end
  local kept = {}
  for _, node in ipairs(nodes) do
    if not is_drained(node) then kept[#kept + 1] = node end
  end
  return kept
end

-- The live compute nodes (heard from since `cutoff`) that are not drained, sorted by id:
-- the round-robin moves' candidates (a lost node's jobs, a due job whose node is gone, an
-- external registry's retries).
local function live_nodes(cutoff)
  local live = undrained(redis.call("ZRANGEBYSCORE", K.nodes_compute, cutoff, "+inf"))
  table.sort(live)
  return live
end

local function is_live(node, cutoff)
  local seen = redis.call("ZSCORE", K.nodes_compute, node)
  return seen ~= false and tonumber(seen) >= cutoff
end

-- A node a job may be put on now: live and not drained.
local function placeable(node, cutoff)
  return is_live(node, cutoff) and not is_drained(node)
end

-- Round-robin (placement.choose): the ticket from one INCR shared by every replica.
local function next_live(nodes)
  if #nodes == 0 then return nil end
  local ticket = redis.call("INCR", K.rr_seq)
  return nodes[((ticket - 1) % #nodes) + 1]
end

-- Whether a job asks anything of its node beyond a slot (models.asks_fit): such a job is
-- placed by fit, and one that must leave its node waits unplaced for the next placement
-- pass rather than going round-robin.
local function needs_fit(job)
  local selector = job.node_selector
  return (tonumber(job.cpus) or 0) > 0 or (tonumber(job.memory_mb) or 0) > 0
    or (type(selector) == "table" and next(selector) ~= nil)
end

-- Nodes for some namespaces (docs/GUIDE.md): a compute node labelled `namespace=team-a` (or
-- `team-a.team-b`) runs only those namespaces' jobs; {P}:nodes:namespaces holds each such
-- node's label (index_node). With none there, the usual case, every node serves every
-- namespace and placement reads nothing more than this EXISTS.
local function any_dedicated()
  return redis.call("EXISTS", K.nodes_namespaces) == 1
end

-- Whether a node whose `namespace` label is `value` (false: none) may run a job of
-- `namespace` (as stored: "" or nil for the default's): models.labels.serves.
local function lets(value, namespace)
  if not value then return true end
  local name = (namespace or "") == "" and DEFAULT_NAMESPACE or namespace
  local j = NAMESPACE_JOIN
  return string.find(j .. value .. j, j .. name .. j, 1, true) ~= nil
end

local function serves(node, namespace)
  return lets(redis.call("HGET", K.nodes_namespaces, node), namespace)
end

-- Of `nodes`, which serve `namespace`: a list of booleans (one HMGET), or nil when every
-- one does (no node is labelled for namespaces).
local function serving(nodes, namespace)
  if #nodes == 0 or not any_dedicated() then return nil end
  local values = redis.call("HMGET", K.nodes_namespaces, unpack(nodes))
  local out = {}
  for i = 1, #nodes do out[i] = lets(values[i], namespace) end
  return out
end

-- Whether a job is placed by fit rather than round-robin: it asks a fit (needs_fit), or some
-- node serves only some namespaces (the round-robin moves know no namespace): then one that
-- must leave its node waits unplaced for the next placement pass, as a job that asks does.
local function placed_by_fit(job)
  return needs_fit(job) or any_dedicated()
end

-- Room may have appeared (a job ended or left a node, a node registered, came back or was
-- undrained): the next PLACE_UNPLACED pass starts from the head of the unplaced jobs.
local function flag_unplaced()
  if redis.call("EXISTS", K.unplaced) == 1 then redis.call("SET", K.unplaced_retry, "-inf") end
end

-- What a node offers and holds, per what a job may ask (its record's field names). A node
-- that offers 0 (unknown, as the Rust agent's memory) is not checked: it offers UNCHECKED,
-- more than any ask, in the offer and free indexes (exact as a double minus any ask).
local ROOM = {"cpus", "memory_mb"}

-- What `job` asks of each of ROOM (0: nothing), in ROOM's order.
local function asks_of(job)
  return {tonumber(job.cpus) or 0, tonumber(job.memory_mb) or 0}
end

local UNCHECKED = 4503599627370496

-- Job `id`'s asks held on `node` while it is bound there (places.py HOLDS): its cpus and
-- memory_mb taken from the node's free room (and added to its room hash's held sums, from
-- which the free room is made again when its offer changes), one job in its load. The set of held
-- jobs makes both idempotent: a job counts once, and only a job counted is given back (jobs
-- bound before this version, or given back already, change nothing).
local function take_room(node, job, sign)
  local asks = asks_of(job)
  for i, what in ipairs(ROOM) do
    if asks[i] > 0 then
      redis.call("HINCRBY", K.node_room(node), "held_" .. what, sign * asks[i])
      redis.call("ZADD", K.nodes_free(what), "XX", "INCR", -sign * asks[i], node)
    end
  end
  -- (the increment as text: a Lua number given to a command is formatted first)
  redis.call("ZADD", K.nodes_load, "XX", "INCR", sign > 0 and "1" or "-1", node)
end

local function hold(node, id, job)
  if node == "" or redis.call("SADD", K.node_held(node), id) == 0 then return end
  take_room(node, job, 1)
end

local function unhold(node, id, job)
  if node == "" or redis.call("SREM", K.node_held(node), id) == 0 then return end
  take_room(node, job, -1)
  flag_unplaced()
end

-- The node's place among the placeable nodes (nodes:load): there, scored by the jobs it
-- holds, while it is a registered compute node and not drained; else out. Called when one
-- of those changes (a registration, a delete, a heartbeat after silence, a drain and an
-- undrain: drains.lua set_drain, lift_drain); whether it is live is checked as it is picked.
local function refresh_load(node)
  if redis.call("HEXISTS", K.nodes, node) == 1 and redis.call("ZSCORE", K.nodes_compute, node)
    and not is_drained(node) then
    redis.call("ZADD", K.nodes_load, redis.call("SCARD", K.node_held(node)), node)
  else
    redis.call("ZREM", K.nodes_load, node)
  end
end

-- A node's labels as "key=value", from its record: its registered ones and the scheduler's
-- node.id and, when `vouched` (the operator vouched for its registration: nodes.py
-- REGISTER_NODE), node.hostname (models/labels.py node_labels).
local function node_labels(node, record, vouched)
  local out = {"node.id=" .. node}
  if vouched and type(record.hostname) == "string" and record.hostname ~= "" then
    out[2] = "node.hostname=" .. record.hostname
  end
  if type(record.labels) == "table" then
    for key, value in pairs(record.labels) do out[#out + 1] = key .. "=" .. value end
  end
  return out
end

-- What placement reads of node `node` (its label sets and the namespaces it serves, its
-- offer and free room, its place in nodes:load) from its record `new` (JSON; nil once
-- deleted), replacing what its record `old` said (JSON or nil); then the unplaced jobs may
-- fit. Only compute nodes are indexed.
-- Its old hostname label goes whether or not it was vouched for (an earlier version
-- indexed every node's).
local function index_node(node, old, new)
  if old then
    for _, label in ipairs(node_labels(node, cjson.decode(old), true)) do
      redis.call("SREM", K.label_nodes(label), node)
    end
  end
  local record = new and cjson.decode(new)
  if record and record.role == "compute" then
    local vouched = redis.call("SISMEMBER", K.nodes_vouched, node) == 1
    for _, label in ipairs(node_labels(node, record, vouched)) do
      redis.call("SADD", K.label_nodes(label), node)
    end
    -- (an empty one, which only a version before this one let through, is none)
    local served = type(record.labels) == "table" and record.labels[NAMESPACE_LABEL]
    if type(served) == "string" and served ~= "" then
      redis.call("HSET", K.nodes_namespaces, node, served)
    else
      redis.call("HDEL", K.nodes_namespaces, node)
    end
    local offers = {tonumber(record.cpu_count) or 0, tonumber(record.memory_mb) or 0}
    for i, what in ipairs(ROOM) do
      local offered = offers[i] > 0 and offers[i] or UNCHECKED
      local held = tonumber(redis.call("HGET", K.node_room(node), "held_" .. what)) or 0
      redis.call("ZADD", K.nodes_offer(what), offered, node)
      redis.call("ZADD", K.nodes_free(what), offered - held, node)
    end
  else
    for _, what in ipairs(ROOM) do
      redis.call("ZREM", K.nodes_offer(what), node)
      redis.call("ZREM", K.nodes_free(what), node)
    end
    redis.call("HDEL", K.nodes_namespaces, node)
  end
  refresh_load(node)
  flag_unplaced()
end

--- @include "keys"
--- @include "REASON"
--- @include "ROOM"
--- @include "UNCHECKED"
--- @include "needs_fit"
--- @include "next_live"
--- @include "placeable"
--- @include "rebind"
--- @include "serves"
--- @include "serving"
--- @include "undrained"

-- Placement (docs/GUIDE.md, Placement; nodes/placement.py is its model, which the tests hold
-- it to), in two parts: room.lua, before a job's life (life.lua uses it: what a node offers
-- and holds, `hold` and `unhold`, and the round-robin moves), and this file, after it (`place`
-- binds a job through life.lua's `rebind`).
--
-- What placement reads, each kept by the scripts that change it:
-- - `{P}:nodes:load`, the placeable nodes (registered compute, not drained, not found dead)
--   scored by the jobs each holds: a job that asks nothing takes the least loaded, ties broken
--   round-robin by the shared ticket, in O(log n) whatever the number of nodes;
-- - `{P}:node:{n}:held` (the jobs a node holds: bound to it and pending, running or
--   cancelling), `{P}:node:{n}:room` (what they hold: `held_cpus`, `held_memory_mb`) and
--   `{P}:nodes:free:{cpus,memory_mb}` (each node's offer less that), changed only by `hold`
--   and `unhold`, which `rebind` and `finish` call: every bind and unbind of a job goes
--   through them; `{P}:nodes:offer:{cpus,memory_mb}` (what each offers) and the free room
--   are set again from a registration (`index_node`);
-- - `{P}:label:<key>=<value>`, the compute nodes with each label (REGISTER_NODE,
--   DELETE_NODE);
-- - `{P}:nodes:drained` (drains.lua): a node there is never a candidate;
-- - `{P}:nodes:namespaces` (room.lua serves): a node there takes only the jobs of the
--   namespaces its label names; a job that asks nothing goes by fit when the least loaded
--   node is of another namespace, and one that must leave its node waits for the pass;
-- - `{P}:unplaced`, the pending jobs no node could take (node_id ""), in queue order, and
--   `{P}:unplaced:retry`, set when room may have appeared: PLACE_UNPLACED (the worker's
--   promote tick, every second) then tries them again, from the head.

-- The compute nodes whose labels satisfy `selector` (models.labels.matches), sorted by id;
-- nil without a selector (any node will do). From the label sets: the nodes of the key with
-- the fewest, each checked against the other keys (for a list of values, any of them), so
-- no temporary key is written.
local function selector_nodes(selector)
  if type(selector) ~= "table" or next(selector) == nil then return nil end
  local wanted, smallest, size = {}, 1, math.huge
  for key, values in pairs(selector) do
    if type(values) ~= "table" then values = {values} end
    local count = 0
    for _, value in ipairs(values) do
      count = count + redis.call("SCARD", K.label_nodes(key .. "=" .. value))
    end
    wanted[#wanted + 1] = {key, values}
    if count < size then smallest, size = #wanted, count end
  end
  local found, seen = {}, {}
  for _, value in ipairs(wanted[smallest][2]) do
    local key = wanted[smallest][1]
    for _, node in ipairs(redis.call("SMEMBERS", K.label_nodes(key .. "=" .. value))) do
      local fits = not seen[node]
      seen[node] = true
      for i = 1, #wanted do
        if fits and i ~= smallest then
          local any = false
          for _, other in ipairs(wanted[i][2]) do
            local label = wanted[i][1] .. "=" .. other
            if redis.call("SISMEMBER", K.label_nodes(label), node) == 1 then
              any = true
              break
            end
          end
          fits = any
        end
      end
      if fits then found[#found + 1] = node end
    end
  end
  table.sort(found)
  return found
end

-- Round-robin among ties (placement.rotate): of `group` (the nodes holding one number of
-- jobs, sorted by id), the first that `fits`, from the ticket's place on.
local function rotate(group, ticket, fits)
  local start = (ticket - 1) % #group
  for k = 0, #group - 1 do
    local node = group[((start + k) % #group) + 1]
    if fits(node) then return node end
  end
  return nil
end

-- The next round-robin ticket, drawn (INCR) only by the placement that uses it.
local function next_ticket()
  return (tonumber(redis.call("GET", K.rr_seq)) or 0) + 1
end

-- How many of the least loaded nodes least_loaded reads at once.
local LOAD_HEAD = 8

-- A job that asks nothing: the least loaded placeable node from nodes:load, by rank (equal
-- scores sort by id there, so the lowest ones are the ties), O(log n) whatever the number
-- of nodes, and the ticket drawn (nil: none, nodes:load is empty). A node found dead or
-- drained leaves it (refresh_load brings it back), so each is skipped once.
local function least_loaded(cutoff)
  local ticket
  while true do
    -- The first LOAD_HEAD nodes: the ties are counted there unless all of them tie (two
    -- reads fewer than counting them apart, the usual case of a fleet not all idle).
    local head = redis.call("ZRANGE", K.nodes_load, 0, LOAD_HEAD - 1, "WITHSCORES")
    if #head == 0 then return nil, ticket end
    local count = 1
    while count < #head / 2 and head[2 * count + 2] == head[2] do count = count + 1 end
    if count == LOAD_HEAD then count = redis.call("ZCOUNT", K.nodes_load, head[2], head[2]) end
    ticket = ticket or redis.call("INCR", K.rr_seq)
    local at = (ticket - 1) % count
    local node = at < LOAD_HEAD and head[2 * at + 1]
      or redis.call("ZRANGE", K.nodes_load, at, at)[1]
    if placeable(node, cutoff) then return node, ticket end
    redis.call("ZREM", K.nodes_load, node)
  end
end

-- Of `nodes`, which offer `cpus` and `memory` at all, and which have room for them now
-- (placement.offers, fits): two lists of booleans, read from the offer and free indexes a
-- dimension at a time, only for what is asked. A node missing there (registered by a
-- version before this one) is not checked, as one offering 0.
local function rooms(nodes, cpus, memory)
  local offers, room = {}, {}
  for i = 1, #nodes do offers[i], room[i] = true, true end
  for d, ask in ipairs({cpus, memory}) do
    if ask > 0 and #nodes > 0 then
      local offered = redis.call("ZMSCORE", K.nodes_offer(ROOM[d]), unpack(nodes))
      local free = redis.call("ZMSCORE", K.nodes_free(ROOM[d]), unpack(nodes))
      for i = 1, #nodes do
        offers[i] = offers[i] and (tonumber(offered[i]) or UNCHECKED) >= ask
        room[i] = room[i] and (tonumber(free[i]) or UNCHECKED) >= ask
      end
    end
  end
  return offers, room
end

-- Whether some node has room for `cpus` and `memory` now, live or not, by the free
-- indexes alone (O(log n)): when none has, no walk is needed to know it.
local function any_room(cpus, memory)
  for d, ask in ipairs({cpus, memory}) do
    if ask > 0 and redis.call("ZCOUNT", K.nodes_free(ROOM[d]), ask, "+inf") == 0 then
      return false
    end
  end
  return true
end

-- A job that asks only resources (or nothing, while some node serves only some namespaces):
-- nodes:load walked from its least loaded nodes, a load at a time, each tie rotated from the
-- ticket's place (rotate), 4 nodes a read doubling to 32; the first live, undrained node
-- with room that serves `namespace`. The work is the nodes passed over before it, read in
-- batches, not the fleet.
local function walk_load(cutoff, cpus, memory, ticket, namespace)
  local rank, any_drained, size = 0, redis.call("EXISTS", K.drained_nodes) == 1, 4
  while true do
    local head = redis.call("ZRANGE", K.nodes_load, rank, rank, "WITHSCORES")
    if #head == 0 then return nil end
    local count = redis.call("ZCOUNT", K.nodes_load, head[2], head[2])
    local start, seen = (ticket - 1) % count, 0
    while seen < count do
      local from = (start + seen) % count
      local upto = math.min(count - 1, from + size - 1, from + count - seen - 1)
      size = math.min(size * 2, 32)  -- the first node usually has room: read few first
      local window = redis.call("ZRANGE", K.nodes_load, rank + from, rank + upto)
      local alive = redis.call("ZMSCORE", K.nodes_compute, unpack(window))
      local drained = any_drained and redis.call("HMGET", K.drained_nodes, unpack(window)) or {}
      local _, room = rooms(window, cpus, memory)
      local theirs = serving(window, namespace)
      for i, node in ipairs(window) do
        if room[i] and not drained[i] and alive[i] and tonumber(alive[i]) >= cutoff
          and (not theirs or theirs[i]) then
          return node
        end
      end
      seen = seen + upto - from + 1
    end
    rank = rank + count
  end
end

-- Why no live node takes a job no live node matches (by its labels or by what it offers): no
-- live compute node at all (no_nodes), none that serves its namespace (namespace), else
-- no_fit. The live nodes are read 100 at a time only while some node serves only some
-- namespaces, until one serves it.
local function unmatched(cutoff, namespace)
  local read = 0
  while true do
    local chunk = redis.call("ZRANGEBYSCORE", K.nodes_compute, cutoff, "+inf", "LIMIT", read, 100)
    if #chunk == 0 then return read == 0 and REASON.no_nodes or REASON.namespace end
    local theirs = serving(chunk, namespace)
    if not theirs then return REASON.no_fit end
    for i = 1, #chunk do
      if theirs[i] then return REASON.no_fit end
    end
    read = read + #chunk
  end
end

-- Why no node takes a job that asks only resources: of the live compute nodes that serve
-- its namespace and offer what it asks (read from the offer index of the dimension fewer
-- nodes offer enough of, 32 at a time, until one answers), an undrained one (full: it has
-- no room now) or only drained ones (drained); none: `unmatched`.
local function why_not(cutoff, cpus, memory, namespace)
  local asks, by = {cpus, memory}, cpus > 0 and 1 or 2
  if cpus > 0 and memory > 0 and redis.call("ZCOUNT", K.nodes_offer(ROOM[2]), memory, "+inf")
    < redis.call("ZCOUNT", K.nodes_offer(ROOM[1]), cpus, "+inf") then
    by = 2
  end
  local other, any_drained = 3 - by, redis.call("EXISTS", K.drained_nodes) == 1
  local drained_only, read = false, 0
  while true do
    local chunk = redis.call(
      "ZRANGEBYSCORE", K.nodes_offer(ROOM[by]), asks[by], "+inf", "LIMIT", read, 32)
    if #chunk == 0 then break end
    read = read + #chunk
    local alive = redis.call("ZMSCORE", K.nodes_compute, unpack(chunk))
    local drained = any_drained and redis.call("HMGET", K.drained_nodes, unpack(chunk)) or {}
    local offered = asks[other] > 0
      and redis.call("ZMSCORE", K.nodes_offer(ROOM[other]), unpack(chunk)) or {}
    local theirs = serving(chunk, namespace)
    for i = 1, #chunk do
      local offers = asks[other] == 0 or (tonumber(offered[i]) or UNCHECKED) >= asks[other]
      if offers and alive[i] and tonumber(alive[i]) >= cutoff and (not theirs or theirs[i]) then
        if not drained[i] then return REASON.full end
        drained_only = true
      end
    end
  end
  if drained_only then return REASON.drained end
  return unmatched(cutoff, namespace)
end

-- A job that asks resources or labels, or any job while some node serves only some
-- namespaces (placement.find_node): of the live, undrained compute nodes its selector
-- matches, those that serve its namespace with room for what it asks now (0 offered: not
-- checked); the least loaded of them, ties rotated from the ticket (rotate over every such
-- node of that load, passing over one of another namespace as one without room). Else nil
-- and why: no live compute node (no_nodes), none serving its namespace (namespace), none of
-- those matching its labels and offering enough (no_fit), only drained ones (drained), none
-- with room now (full). A job that asks no labels walks nodes:load (walk_load) unless the
-- free indexes say no node has room, then finds why (why_not); one that names labels reads
-- its selector's nodes, 200 at a time. `drawn`: the ticket least_loaded drew already (nil:
-- the next one, drawn only when a node is found).
local function fitting_node(job, cutoff, drawn)
  local cpus, memory = tonumber(job.cpus) or 0, tonumber(job.memory_mb) or 0
  local ticket, namespace = drawn or next_ticket(), job.namespace
  local ids = selector_nodes(job.node_selector)
  if not ids then
    local node = any_room(cpus, memory) and walk_load(cutoff, cpus, memory, ticket, namespace)
    if node then
      if not drawn then redis.call("INCR", K.rr_seq) end
      return node
    end
    return nil, why_not(cutoff, cpus, memory, namespace)
  end
  local any_drained = redis.call("EXISTS", K.drained_nodes) == 1
  local matched, open, loads, fitting, low = 0, 0, {}, {}, math.huge
  for first = 1, #ids, 200 do
    local chunk = {}
    for i = first, math.min(first + 199, #ids) do chunk[#chunk + 1] = ids[i] end
    local seen = redis.call("ZMSCORE", K.nodes_compute, unpack(chunk))
    local drained = any_drained and redis.call("HMGET", K.drained_nodes, unpack(chunk)) or {}
    local held = redis.call("ZMSCORE", K.nodes_load, unpack(chunk))
    local offers, room = rooms(chunk, cpus, memory)
    local theirs = serving(chunk, namespace)
    for i, node in ipairs(chunk) do
      if seen[i] and tonumber(seen[i]) >= cutoff then
        local its = not theirs or theirs[i]
        if offers[i] and its then matched = matched + 1 end
        if offers[i] and its and not drained[i] then open = open + 1 end
        if not drained[i] then
          local load = tonumber(held[i]) or redis.call("SCARD", K.node_held(node))
          loads[#loads + 1] = {node, load}
          if room[i] and its then
            fitting[node] = true
            if load < low then low = load end
          end
        end
      end
    end
  end
  if low < math.huge then
    local group = {}
    for _, pair in ipairs(loads) do
      if pair[2] == low then group[#group + 1] = pair[1] end
    end
    if not drawn then redis.call("INCR", K.rr_seq) end
    return rotate(group, ticket, function(node) return fitting[node] end)
  end
  if matched == 0 then return nil, unmatched(cutoff, namespace) end
  return nil, open == 0 and REASON.drained or REASON.full
end

-- Where a job goes now (docs/GUIDE.md, Placement; placement.find_node): a node, or nil and why.
-- Reads only the job's asks (cpus, memory_mb, node_selector) and namespace; draws the ticket
-- only when it finds a node. A job that asks nothing takes the least loaded placeable node
-- when that serves its namespace (every node does while none is labelled for some: one
-- HGET more); else (the least loaded of another namespace, or none) it is placed by fit
-- with the same ticket (walk_load, which passes over the nodes of other namespaces), or the
-- reason is found as for any job.
local function find_node(job, cutoff)
  local ticket
  if not needs_fit(job) then
    local node
    node, ticket = least_loaded(cutoff)
    if node and serves(node, job.namespace) then return node end
  end
  return fitting_node(job, cutoff, ticket)
end

-- The node of a new job (CREATE_JOB; GET /schedule's PICK_NODE; RETRY_JOBS) by the
-- registry's mode: "fixed", the one given (an instance's node); "list", round-robin over an
-- external registry's healthy nodes (it knows no labels nor room); "live", the built-in
-- registry's, by find_node. A drained node is none of them. nil and why when there is none.
local function pick_node(mode, candidates, job, cutoff)
  if mode == "live" then return find_node(job, cutoff) end
  candidates = undrained(candidates)
  if mode == "fixed" then return candidates[1], REASON.drained end
  return next_live(candidates), REASON.no_nodes
end

-- THE placement of a stored job: job `id` (number n, decoded; any status, on a node or
-- unplaced; not instance-bound) pending now on the node find_node gives, holding its asks
-- there (life.lua rebind); with none, pending unplaced (node_id "", in {P}:unplaced) with
-- its pending_reason. PLACE_UNPLACED, PROMOTE_DUE, RETRY_JOBS and DRAIN_NODE (a drained
-- node's pending jobs: drains.lua move_off) call it; nodes are live since `cutoff`. The
-- caller stores the record (store_job). `failed` (optional, kept through one script's
-- jobs): the asks (and namespaces) that found no node, with why; placing jobs only takes
-- room, so such an ask finds none again and each distinct ask reads its candidates once a
-- script. Returns the node or nil, and the reason.
local function place(id, n, job, cutoff, failed)
  local ask = failed and (job.cpus or 0) .. " " .. (job.memory_mb or 0) .. " "
    .. (job.namespace or "") .. " " .. cjson.encode(job.node_selector or {})
  local node, reason = nil, ask and failed[ask]
  if not reason then node, reason = find_node(job, cutoff) end
  if node then
    rebind(id, n, job, "pending", node)
  else
    if job.node_id ~= "" or job.status ~= "pending" then rebind(id, n, job, "pending", "") end
    job.pending_reason = reason
    if ask then failed[ask] = reason end
  end
  return node, reason
end

-- The new job's number drawn, then the job placed (or passed on: NO_NODES, the draw undone)
-- and its head written: `job`. Its number is its ticket among tied nodes (place.lua
-- least_loaded): jobs made one after another go round them.
local drawn, counter, began = draw_number(K.job_seq, shards, shard, id_floor)
local function undrawn(reply)
  undraw(K.job_seq, counter, began)
  return unmade(reply)
end
if began and redis.call("EXISTS", K.initialised) == 0 then
  -- A Redis that came back empty (its counter began again): the snapshot is restored first
  -- (ready.lua says why); only a counter that began needs the marker read.
  return undrawn({NOT_READY})
end
local ask = asks == "" and {cpus = 0, memory_mb = 0} or cjson.decode(asks)
local node, reason = nil, nil
cutoff = tonumber(cutoff)
if due == "" or not needs_fit(ask) then
  node, reason = pick_node(mode, candidates, ask, cutoff, counter)
elseif elsewhere == "1" then
  -- A delayed job that asks a fit is placed when due. Where other shards may take it, it
  -- still needs a node here that matches it (room or not): with none it passes on, as one
  -- due now does, rather than wait where no node may ever take it.
  local _, why = pick_node(mode, candidates, ask, cutoff, counter)
  if why == REASON.no_fit or why == REASON.no_nodes then reason = why end
end
if not node and reason and (mode ~= "live" or reason == REASON.no_nodes and not needs_fit(ask)
    or elsewhere == "1") then
  -- a replay of the key passes on here to the shard that made it (store/jobs.py)
  if dedup and elsewhere == "1" then
    redis.call("SET", dedup, ELSEWHERE, "EX", tonumber(dedup_ttl))
  end
  return undrawn({NO_NODES})
end
node = node or ""
-- Its number as digits, formatted once: the indexes' scores (read.lua number_of says why).
local n = tostring(drawn)
local id = "job-" .. n
-- Its head: the ids and, pending unplaced, why (models.job PENDING_REASONS), its first
-- event's number (events.lua note_event: the event store_new notes), then the record's
-- other fields (its head's members).
local unplaced = due == "" and node == "" and reason
local reason_field = unplaced and ',"pending_reason":' .. cjson.encode(reason) or ""
local job = '{"job_id":' .. cjson.encode(id) .. ',"node_id":' .. cjson.encode(node)
  .. reason_field .. ',"' .. EVENT_COUNT .. '":"1",' .. fields .. "}"

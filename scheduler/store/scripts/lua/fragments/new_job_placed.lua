-- The new job placed (or passed on: NO_NODES), its id drawn and its head written: `job`.
local ask = {cpus = tonumber(cpus), memory_mb = tonumber(memory_mb),
  node_selector = selector ~= "" and cjson.decode(selector) or nil, namespace = namespace}
local node, reason = nil, nil
if due == "" or not needs_fit(ask) then
  node, reason = pick_node(mode, candidates, ask, tonumber(now) - tonumber(node_ttl))
elseif elsewhere == "1" then
  -- A delayed job that asks a fit is placed when due. Where other shards may take it, it
  -- still needs a node here that matches it and serves its namespace (room or not): with
  -- none it passes on, as one due now does, rather than wait where no node may ever take it.
  local _, why = pick_node(mode, candidates, ask, tonumber(now) - tonumber(node_ttl))
  if why == REASON.no_fit or why == REASON.no_nodes or why == REASON.namespace then
    reason = why
  end
end
if not node and reason and (mode ~= "live" or reason == REASON.no_nodes and not needs_fit(ask)
    or elsewhere == "1") then
  -- a replay of the key passes on here to the shard that made it (store/jobs.py)
  if dedup and elsewhere == "1" then
    redis.call("SET", dedup, ELSEWHERE, "EX", tonumber(dedup_ttl))
  end
  return unmade({NO_NODES})
end
node = node or ""
local id = "job-" .. draw_number(K.job_seq, shards, shard, id_floor)
local n = string.sub(id, 5)  -- its number as text, as number_of gives it (read.lua)
-- Its head: the ids and, pending unplaced, why (models.job PENDING_REASONS), then the
-- record's other fields (its head's members).
local unplaced = due == "" and node == "" and reason
local reason_field = unplaced and ',"pending_reason":' .. cjson.encode(reason) or ""
local job = '{"job_id":' .. cjson.encode(id) .. ',"node_id":' .. cjson.encode(node)
  .. reason_field .. "," .. fields .. "}"

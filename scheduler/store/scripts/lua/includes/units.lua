--- @include "keys"
--- @include "NODE_UNITS"
--- @include "RECORD_BYTES_UNIT"

-- The units and a call's pace, before life.lua in the library (its loops charge them too). One
-- name a `local`: a script gets the definitions it names (library.py), each by its own.

-- The units a job's record of `bytes` costs beyond its flat ENDED_UNITS (or VISIT_UNITS).
local function record_units(bytes) return math.floor(bytes / RECORD_BYTES_UNIT) end

-- The units placing `job` costs beyond its record: a label set looked up for each value its
-- node_selector allows (up to 256: models/labels.py), about 2 µs each, and NODE_UNITS for
-- each node placement reads: those of the selector's key with the fewest (place.lua
-- selector_nodes), counted as it counts them. A selector every node matches reads them all
-- (about 3 µs a node: 2,000 in 6 ms), so a pass places fewer such jobs a call. A job that
-- names no labels, while some nodes serve only some namespaces ({P}:nodes:namespaces), may
-- walk past every one of them (place.lua walk_load: they sit idle at the head of the load
-- index for the other namespaces' jobs): NODE_UNITS each.
local function placing_units(job)
  if type(job.node_selector) ~= "table" or next(job.node_selector) == nil then
    return redis.call("HLEN", K.nodes_namespaces) * NODE_UNITS
  end
  local looked, fewest = 0, nil
  for key, values in pairs(job.node_selector) do
    if type(values) ~= "table" then values = {values} end
    local nodes = 0
    for _, value in ipairs(values) do
      nodes = nodes + redis.call("SCARD", K.label_nodes(key .. "=" .. value))
    end
    looked = looked + #values
    if not fewest or nodes < fewest then fewest = nodes end
  end
  return looked + (fewest or 0) * NODE_UNITS
end

-- What one script call may still spend (`left` of its `units`), and the entries of the
-- endings it made itself (`own`, settled first, from `next` on).
local function pace_of(units)
  return {left = units, units = units, own = {}, next = 1}
end

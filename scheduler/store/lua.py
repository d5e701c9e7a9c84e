"""The building blocks of the Lua scripts (scripts.py, upkeep_scripts.py).

Every state change of a job or node is one script, atomic and one round trip. KEYS[1] is
always the key root (`Keys.root`); keys that depend on a value only known inside the script (a
job id from INCR, the node a job is bound to) are derived from it by the `key_*` functions
generated in keys.py. Every other key is passed in KEYS.

Return codes are turned into exceptions by the typed wrappers in commands.py.
"""

from __future__ import annotations

import re

from scheduler.models import FINAL_STATUSES, JOB_FIELDS
from scheduler.store.keys import lua_key_functions

# Return codes shared by the scripts and commands.py.
OK = 1
NOT_FOUND = 0
DUPLICATE = 2
FINISHED = 3
ALREADY_RUNNING = 4
NOT_RUNNING = 5
NO_NODES = 6
NOT_READY = 7
UNAUTHORIZED = 8
FORBIDDEN = 9
TOO_MANY_NODES = 10
ROLE_LOCKED = 11
OTHER_NODE = 12
CANCELLING = 13
NOT_CANCELLING = 14

CODES = f"""
local OK, NOT_FOUND, DUPLICATE, FINISHED = {OK}, {NOT_FOUND}, {DUPLICATE}, {FINISHED}
local ALREADY_RUNNING, NOT_RUNNING, NO_NODES = {ALREADY_RUNNING}, {NOT_RUNNING}, {NO_NODES}
local NOT_READY, UNAUTHORIZED, FORBIDDEN = {NOT_READY}, {UNAUTHORIZED}, {FORBIDDEN}
local TOO_MANY_NODES, ROLE_LOCKED, OTHER_NODE = {TOO_MANY_NODES}, {ROLE_LOCKED}, {OTHER_NODE}
local CANCELLING, NOT_CANCELLING = {CANCELLING}, {NOT_CANCELLING}
"""
# The final statuses (models.FINAL_STATUSES): FINAL[status] is true for them.
FINAL = "local FINAL = {" + ", ".join(f"{s} = true" for s in FINAL_STATUSES) + "}"

# Who makes an agent call (AGENT_AUTH, README "Security"); the API works it out, in process,
# from the Authorization header and passes it as one ARGV:
#   "open"  AGENT_AUTH=open: agent calls need nothing (the original Rust agent sends no key)
#   "key"   the request carries TINYAWS_API_KEY: the operator, allowed everywhere
#   "join"  the request carries AGENT_JOIN_KEY: may register a node (REGISTER_NODE), no more
#   ""      no bearer token
#   else    the SHA-256 (hex) of the bearer token; Redis never sees a token itself
# A node token reaches its own node only: its poll, its heartbeat, the jobs bound to it.
CALLER = """
local function node_access(tokens_key, caller, node)
  if caller == "open" or caller == "key" then return OK end
  if caller == "" then return UNAUTHORIZED end
  local owner = redis.call("HGET", tokens_key, caller)
  if not owner then return UNAUTHORIZED end
  if owner ~= node then return FORBIDDEN end
  return OK
end
"""

# Placement, the same rule as placement.choose: candidates sorted by id, ticket from INCR.
# mode "fixed": ARGV holds the one node (instance-bound, no ticket); "list": ARGV holds the
# sorted healthy nodes of an external registry; "live": the built-in registry's compute nodes
# heard from within the TTL.
PLACEMENT = """
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
READ = """
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


def _record_fields() -> str:
    """The Lua table of Job's fields in Go's order, each with its omission rule: "always"
    (no default), "null" (omitted only when absent: exit_code 0 is written) or "empty"."""
    rows = []
    for field in JOB_FIELDS:
        rule = "always" if field.required else "null" if field.nullable else "empty"
        rows.append(f'{{"{field.name}", "{rule}"}}')
    return "{" + ", ".join(rows) + "}"


# A record written field by field, as Go's encoder wrote it: struct fields in Job's order,
# empty optional ones omitted, map keys sorted. cjson.encode(table) would write them in hash
# order, so the bytes of a job would change with every script that touched it. Fields a
# record holds beyond Job's (kept from a newer version through a restore) follow, sorted.
# cjson escapes "/" as "\\/"; Go does not, and since cjson escapes every "/", undoing it is
# exact.
ENCODE = f"""
local RECORD_FIELDS = {_record_fields()}
local RECORD_KNOWN = {{}}
for _, field in ipairs(RECORD_FIELDS) do RECORD_KNOWN[field[1]] = true end

local function encode_sorted(map)
  local names, out = {{}}, {{}}
  for name in pairs(map) do names[#names + 1] = name end
  table.sort(names)
  for i, name in ipairs(names) do
    out[i] = cjson.encode(name) .. ":" .. cjson.encode(map[name])
  end
  return "{{" .. table.concat(out, ",") .. "}}"
end

local function omitted(value, rule)
  if value == nil or value == cjson.null then return rule ~= "always" end
  if rule ~= "empty" then return false end
  if type(value) == "table" then return next(value) == nil end
  return value == "" or value == 0
end

local function encode(job)
  local out = {{}}
  for _, field in ipairs(RECORD_FIELDS) do
    local name, value = field[1], job[field[1]]
    if not omitted(value, field[2]) then
      local text = type(value) == "table" and encode_sorted(value) or cjson.encode(value)
      out[#out + 1] = '"' .. name .. '":' .. text
    end
  end
  local extra = {{}}
  for name in pairs(job) do
    if not RECORD_KNOWN[name] then extra[#extra + 1] = name end
  end
  table.sort(extra)
  for _, name in ipairs(extra) do
    out[#out + 1] = cjson.encode(name) .. ":" .. cjson.encode(job[name])
  end
  return (string.gsub("{{" .. table.concat(out, ",") .. "}}", "\\\\/", "/"))
end
"""

INDEX = (
    """
local function move(id, score, node, from, to)
  redis.call("ZREM", key_status(from), id)
  redis.call("ZADD", key_status(to), score, id)
  redis.call("ZREM", key_node_status(node, from), id)
  redis.call("ZADD", key_node_status(node, to), score, id)
end

{ENCODE}
local function publish(outbox_key, event_seq_key, id, status)
  local n = redis.call("INCR", event_seq_key)
  local message = '{"job_id":' .. cjson.encode(id) .. ',"status":"' .. status .. '"}'
  redis.call("RPUSH", outbox_key, n .. " " .. message)
end

-- Store the changed job and mark it for the next snapshot; returns what was stored.
local function store_job(job_key, dirty_key, id, job)
  local out = encode(job)
  redis.call("SET", job_key, out)
  redis.call("SADD", dirty_key, id)
  return out
end
"""
).replace("{ENCODE}", ENCODE)


# Long-polls (store/notify.py) wait on these channels; a PUBLISH nobody listens to costs
# Redis one hash lookup.
WAKE = """
local function wake_node(node) redis.call("PUBLISH", key_node_channel(node), "") end
local function wake_job(id) redis.call("PUBLISH", key_job_channel(id), "") end
"""


# Nodes that come and go (upkeep_scripts: lost nodes; scripts: a node deregistering). Needs
# INDEX and WAKE. `live` is the sorted compute nodes heard from since the live cutoff.
REBIND = """
local function live_nodes(compute_key, live_cutoff)
  local live = redis.call("ZRANGEBYSCORE", compute_key, live_cutoff, "+inf")
  table.sort(live)
  return live
end

-- The next live node, round-robin (the ticket placement uses); nil when none is live.
local function next_live(live, rr_key)
  if #live == 0 then return nil end
  local ticket = redis.call("INCR", rr_key)
  return live[((ticket - 1) % #live) + 1]
end

-- Move job `id` (record `job`, number n) from status `old` on its node to status `new` on
-- node `to`, in every index that names the node or the status. The caller stores the record.
local function rebind(id, n, job, old, new, to)
  local from = job.node_id
  move(id, n, from, old, new)
  if to ~= from then
    redis.call("ZREM", key_node_status(from, new), id)
    redis.call("ZADD", key_node_status(to, new), n, id)
    redis.call("ZREM", key_node_jobs(from), id)
    redis.call("ZADD", key_node_jobs(to), n, id)
  end
  job.node_id, job.status = to, new
  wake_job(id)
  if new == "pending" then wake_node(to) end
end

-- Move the pending jobs of `node` that are not instance-bound to live nodes, round-robin,
-- keeping their number (their place in the queue), until `moved` holds `limit` triples
-- {id, from node, to node}. Instance-bound jobs belong to their node and stay.
local function move_pending(node, live, rr_key, dirty_key, jobs_key, limit, moved)
  if #live == 0 then return end
  local queue, skipped = key_node_status(node, "pending"), 0
  while #moved < 3 * limit do
    local ids = redis.call("ZRANGE", queue, skipped, skipped + 99)
    if #ids == 0 then return end
    for _, id in ipairs(ids) do
      local raw = redis.call("GET", key_job(id))
      local job = raw and cjson.decode(raw)
      if not job or (job.instance_id or "") ~= "" then
        skipped = skipped + 1
      else
        local target = next_live(live, rr_key)
        rebind(id, redis.call("ZSCORE", jobs_key, id), job, "pending", "pending", target)
        redis.call("SET", key_job(id), encode(job))
        redis.call("SADD", dirty_key, id)
        moved[#moved + 1], moved[#moved + 2], moved[#moved + 3] = id, node, target
        if #moved >= 3 * limit then return end
      end
    end
  end
end
"""


def script(*parts: str) -> str:
    """The script of `parts`, after the codes and only the key functions and tables it uses:
    Redis makes every definition again on each call, and the unused ones were ~1 µs of a
    poll's ~6 µs of script time."""
    body = "\n".join(parts)
    final = FINAL if re.search(r"\bFINAL\[", body) else ""
    return "\n".join((lua_key_functions(body), CODES, final, body))

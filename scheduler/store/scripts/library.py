"""The Lua the scripts share, and how a script's text is put together (`assemble`).

Every state change of a job or node is one script, atomic and one round trip. A script's
only key is KEYS[1], the deployment's root (`Keys.root`, which carries the hash tag, so a
Redis Cluster routes the call to the deployment's slot); it names every other key `K.<name>`
after the `Keys` member of that name (keys.lua_keys). Its arguments are named once, where the
script is defined (script.Script), and bound to Lua locals of those names at its top.

The library below is a list of definitions. A script gets only those its body uses, and
those they use in turn: Redis builds every definition again on each call, and unused ones
cost about 1 µs of a poll's 6 µs of script time.
"""

from __future__ import annotations

import itertools
import re

from scheduler.models.job import ENDINGS, FINAL_STATUSES, JOB_FIELDS
from scheduler.store.keys import lua_keys
from scheduler.store.scripts.codes import CODES


def _record_fields() -> str:
    """The Lua table of Job's fields in Go's order, each with its omission rule: "always"
    (no default), "null" (omitted only when absent: exit_code 0 is written) or "empty"."""
    rows = []
    for field in JOB_FIELDS:
        rule = "always" if field.required else "null" if field.nullable else "empty"
        rows.append(f'{{"{field.name}", "{rule}"}}')
    return "{" + ", ".join(rows) + "}"


# Who makes an agent call (AGENT_AUTH, README "Security"); the API works it out, in process,
# from the Authorization header and passes it as one argument, `caller`:
#   "open"  AGENT_AUTH=open: agent calls need nothing (the original Rust agent sends no key)
#   "key"   the request carries TINYAWS_API_KEY: the operator, allowed everywhere
#   "join"  the request carries AGENT_JOIN_KEY: may register a node (REGISTER_NODE), no more
#   ""      no bearer token
#   else    the SHA-256 (hex) of the bearer token; Redis never sees a token itself
# A node token reaches its own node only: its poll, its heartbeat, the jobs bound to it.
NODE_ACCESS = """
local function node_access(caller, node)
  if caller == "open" or caller == "key" then return OK end
  if caller == "" then return UNAUTHORIZED end
  local owner = redis.call("HGET", K.tokens, caller)
  if not owner then return UNAUTHORIZED end
  if owner ~= node then return FORBIDDEN end
  return OK
end
"""

# Placement, the rule of placement.choose: candidates sorted by id, the ticket from one INCR
# shared by every replica. Mode "fixed": `candidates` holds the one node (instance-bound, no
# ticket); "list": the sorted healthy nodes of an external registry; "live": the built-in
# registry's compute nodes heard from within the TTL.
PLACEMENT = """
local function live_nodes(cutoff)
  local live = redis.call("ZRANGEBYSCORE", K.nodes_compute, cutoff, "+inf")
  table.sort(live)
  return live
end

local function next_live(nodes)
  if #nodes == 0 then return nil end
  local ticket = redis.call("INCR", K.rr_seq)
  return nodes[((ticket - 1) % #nodes) + 1]
end

local function pick_node(mode, candidates, now, ttl)
  if mode == "fixed" then return candidates[1] end
  if mode == "live" then candidates = live_nodes(now - ttl) end
  return next_live(candidates)
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
    for j = i, math.min(i + 99, #ids) do chunk[#chunk + 1] = K.job(ids[j]) end
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

local function load_job(id)
  local raw = redis.call("GET", K.job(id))
  return raw and cjson.decode(raw), raw
end
"""

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

# Long-polls (connection/notify.py) wait on these channels; a PUBLISH nobody listens to
# costs Redis one hash lookup.
WAKE = """
local function wake_node(node) redis.call("PUBLISH", K.node_channel(node), "") end
local function wake_job(id) redis.call("PUBLISH", K.job_channel(id), "") end
"""

# A job's life. Every index a job is in follows from its status and node (docs/ARCHITECTURE.md,
# "Redis keys"); these are the only code that moves a job between them.
LIFE = """
local function move(id, n, node, from, to)
  redis.call("ZREM", K.status(from), id)
  redis.call("ZADD", K.status(to), n, id)
  redis.call("ZREM", K.node_status(node, from), id)
  redis.call("ZADD", K.node_status(node, to), n, id)
end

-- The changed job stored and marked for the next snapshot; returns what was stored.
local function store_job(id, job)
  local out = encode(job)
  redis.call("SET", K.job(id), out)
  redis.call("SADD", K.dirty, id)
  return out
end

local function publish(id, status)
  local n = redis.call("INCR", K.event_seq)
  local message = '{"job_id":' .. cjson.encode(id) .. ',"status":"' .. status .. '"}'
  redis.call("RPUSH", K.outbox, n .. " " .. message)
end

-- Job `id` (number n) from its status on its node to status `new` on node `to`, in every
-- index that names the node or the status. The caller stores the record.
local function rebind(id, n, job, new, to)
  local from = job.node_id
  move(id, n, from, job.status, new)
  if to ~= from then
    redis.call("ZREM", K.node_status(from, new), id)
    redis.call("ZADD", K.node_status(to, new), n, id)
    redis.call("ZREM", K.node_jobs(from), id)
    redis.call("ZADD", K.node_jobs(to), n, id)
  end
  job.node_id, job.status = to, new
  wake_job(id)
  if new == "pending" then wake_node(to) end
end

-- What a running (or cancelling) job holds, given back: its node's slot, its deadline, its
-- cancel grace.
local function release(id, job)
  redis.call("SREM", K.node_busy(job.node_id), id)
  redis.call("ZREM", K.deadlines, id)
  redis.call("ZREM", K.cancelling, id)
end

-- The one way a job ends, whoever ends it: `ending` names how (models.ENDINGS: done, failed,
-- cancelled, timed_out, node_lost), which sets its status (done or failed: all the original's
-- clients know) and its failure_reason. It gives back what the job held (its node may take
-- work again), moves it to its final indexes with its finish time (retention reads it), and
-- publishes its event: exactly one per job, here and nowhere else. The caller has set the
-- job's other fields. Returns the stored record.
local function finish(id, n, job, ending, now, stamp)
  if FINAL[job.status] then error("finish: " .. id .. " has ended already") end
  local status, reason = ENDINGS[ending][1], ENDINGS[ending][2]
  if job.status == "running" or job.status == "cancelling" then
    release(id, job)
    wake_node(job.node_id)
  end
  move(id, n, job.node_id, job.status, status)
  job.status, job.finished_at = status, stamp
  if reason ~= "" then job.failure_reason = reason end
  redis.call("ZADD", K.finished, now, id)
  publish(id, status)
  wake_job(id)
  return store_job(id, job)
end

-- The jobs that entered `index` (a sorted set scored by when) before `cutoff`, `batch` of
-- them: each leaves the index, and one still `held` ends as `ending`, after `mark(job)`
-- says why (the timeout sweep, the cancels past their grace). Returns {entries read, the
-- ids ended...}: fewer entries than `batch` means the index holds no more expired ones.
local function end_expired(index, cutoff, batch, held, ending, mark, now, stamp)
  local expired = redis.call("ZRANGEBYSCORE", index, "-inf", "(" .. cutoff, "LIMIT", 0, batch)
  local ended = {#expired}
  for _, id in ipairs(expired) do
    redis.call("ZREM", index, id)
    local job = load_job(id)
    if job and job.status == held then
      mark(job)
      finish(id, redis.call("ZSCORE", K.all_jobs, id), job, ending, now, stamp)
      ended[#ended + 1] = id
    end
  end
  return ended
end

-- A running job's next attempt (a failed report, its node lost): pending again on node `to`.
-- It has not ended, so no event. `counted`: the attempt uses one of its retries (a service
-- placed again after its node was lost does not). Returns the stored record.
local function requeue(id, n, job, to, counted)
  release(id, job)
  if counted then job.retry_count = (job.retry_count or 0) + 1 end
  job.exit_code, job.stdout, job.finished_at, job.failure_reason = nil, nil, nil, nil
  rebind(id, n, job, "pending", to)
  return store_job(id, job)
end

-- The pending jobs of `node` that are not instance-bound, moved to `live` nodes round-robin,
-- keeping their number (their place in the queue), until `moved` holds `limit` triples
-- {id, from node, to node}. Instance-bound jobs belong to their node and stay.
local function move_pending(node, live, limit, moved)
  if #live == 0 then return end
  local queue, skipped = K.node_status(node, "pending"), 0
  while #moved < 3 * limit do
    local ids = redis.call("ZRANGE", queue, skipped, skipped + 99)
    if #ids == 0 then return end
    for _, id in ipairs(ids) do
      local job = load_job(id)
      if not job or job.node_id ~= node or job.status ~= "pending" then
        redis.call("ZREM", queue, id)  -- a stale entry: the job is not pending here
      elseif (job.instance_id or "") ~= "" then
        skipped = skipped + 1
      else
        local target = next_live(live)
        rebind(id, redis.call("ZSCORE", K.all_jobs, id), job, "pending", target)
        store_job(id, job)
        moved[#moved + 1], moved[#moved + 2], moved[#moved + 3] = id, node, target
        if #moved >= 3 * limit then return end
      end
    end
  end
end
"""

# The final statuses (models.FINAL_STATUSES): FINAL[status] is true for them. ENDINGS[name]
# is {status, failure_reason} (models.ENDINGS).
FINAL = "local FINAL = {" + ", ".join(f"{s} = true" for s in FINAL_STATUSES) + "}"
ENDING_TABLE = (
    "local ENDINGS = {"
    + ", ".join(f'{name} = {{"{status}", "{why}"}}' for name, (status, why) in ENDINGS.items())
    + "}"
)

# Every definition of the library, by name, in an order where each comes after those it uses
# (a Lua local is seen only by the code after it). A definition starts at its comment.
_DEFINITION = re.compile(r"^(?:--[^\n]*\n)*local (?:function )?(\w+)", re.MULTILINE)


def _split(chunk: str) -> list[tuple[str, str]]:
    """`chunk` as (name, definition) pairs; statements that follow a definition (a loop
    filling its table) belong to it."""
    found = list(_DEFINITION.finditer(chunk))
    ends = [m.start() for m in found[1:]] + [len(chunk)]
    pairs = zip(found, ends, strict=True)
    return [(m.group(1), chunk[m.start() : end].strip()) for m, end in pairs]


LIBRARY: dict[str, str] = dict(
    pair
    for chunk in (FINAL, ENDING_TABLE, NODE_ACCESS, PLACEMENT, READ, ENCODE, WAKE, LIFE)
    for pair in _split(chunk)
)


def _code(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def _uses(text: str) -> set[str]:
    """The library definitions `text` names (`cjson.encode` is not `encode`)."""
    code = _code(text)
    return {name for name in LIBRARY if re.search(rf"(?<![\w.:]){name}(?!\w)", code)}


def _needed(body: str) -> list[str]:
    """The definitions `body` uses, and those they use, in library order."""
    needed: set[str] = set()
    todo = _uses(body)
    while todo:
        name = todo.pop()
        needed.add(name)
        todo |= _uses(LIBRARY[name]) - needed - {name}
    return [name for name in LIBRARY if name in needed]


def _check_order() -> None:
    seen: set[str] = set()
    for name, definition in LIBRARY.items():
        missing = _uses(definition) - seen - {name}
        if missing:
            raise RuntimeError(f"Lua library: {name} uses {sorted(missing)}, defined after it")
        seen.add(name)


_check_order()


def _argv(names: tuple[str, ...], rest: str) -> str:
    """Lua binding each ARGV to its name; `rest` gets a table of the arguments after them."""
    lines = []
    if names:
        values = ", ".join(f"ARGV[{i}]" for i in range(1, len(names) + 1))
        lines.append(f"local {', '.join(names)} = {values}")
    if rest:
        lines.append(
            f"local {rest} = {{}}\n"
            f"for i = {len(names) + 1}, #ARGV do {rest}[#{rest} + 1] = ARGV[i] end"
        )
    return "\n".join(lines)


def assemble(name: str, names: tuple[str, ...], rest: str, body: str) -> str:
    """A script's whole text: its name and the comment `body` starts with, its keys, the
    return codes, the library definitions it uses, its arguments by name, then its code."""
    lines = body.strip().split("\n")
    comment = list(itertools.takewhile(lambda line: line.startswith("--"), lines))
    header = [f"-- {name}", *comment]
    code = "\n".join(lines[len(comment) :])
    definitions = "\n".join(LIBRARY[used] for used in _needed(code))
    keys = lua_keys(_code(definitions + "\n" + code))
    parts = ("\n".join(header), keys, CODES, definitions, _argv(names, rest), code, "")
    return "\n".join(parts)

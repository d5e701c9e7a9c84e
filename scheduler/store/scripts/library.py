"""The Lua the scripts share, and how a script's text is put together (`assemble`).

Every state change of a job or node is one script, atomic and one round trip. A script's
only key is KEYS[1], the deployment's root (`Keys.root`, which carries the hash tag, so a
Redis Cluster routes the call to the deployment's slot); it names every other key `K.<name>`
after the `Keys` member of that name (lua_keys.lua_keys). Its arguments are named once, where the
script is defined (script.Script), and bound to Lua locals of those names at its top.

The library below (and a job's life, life.py) is a list of definitions. A script gets only
those its body uses, and those they use in turn: Redis builds every definition again on each
call, and unused ones cost about 1 µs of a poll's 6 µs of script time.
"""

from __future__ import annotations

import itertools
import re

from scheduler.models.job import ENDINGS, FINAL_STATUSES, MAX_JOB_NUMBER, NOT_STARTED, STATUSES
from scheduler.store.lua_keys import lua_keys
from scheduler.store.scripts.codes import CODES
from scheduler.store.scripts.endings import SETTLE, UNITS
from scheduler.store.scripts.life import ATTEMPTS, LIFE, NODE_LOSS
from scheduler.store.scripts.minutes import SERIES
from scheduler.store.scripts.place import PLACE
from scheduler.store.scripts.places import PLACES_LUA
from scheduler.store.scripts.record import ENCODE, PARTS, TIME
from scheduler.store.scripts.room import NODES

# Who makes an agent call (AGENT_AUTH, docs/SECURITY.md); the API works it out, in process,
# from the Authorization header and passes it as one argument, `caller`:
#   "open"  AGENT_AUTH=open: agent calls need nothing (the original Rust agent sends no key)
#   "key"   the request carries TINYAWS_API_KEY: the operator, allowed everywhere
#   "join"  the request carries AGENT_JOIN_KEY: may register a new id (REGISTER_NODE), no more
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

-- Whether `caller` may act on job `id` for a node (its report), decided before the record is
-- read: from the token and its node's index of jobs alone (one HGET, one ZSCORE), so a
-- refusal costs the same small work whatever the job holds (a record of MiBs is never copied
-- or decoded for a stranger). A caller without a valid token gets UNAUTHORIZED, a node token
-- NOT_FOUND for a job that is not its node's: each the same answer for an id that exists and
-- one that does not, so neither learns which jobs exist. Returns OK and the token's node
-- (nil for "open" and "key", who may act on any job: whether it exists is the caller's
-- business, the original's 404).
local function owned_access(caller, id, kind)
  if caller == "open" or caller == "key" then return OK end
  local owner = caller ~= "" and redis.call("HGET", K.tokens, caller)
  if not owner then return UNAUTHORIZED end
  local index = kind == "job" and K.node_jobs(owner) or K.node_services(owner)
  if not redis.call("ZSCORE", index, id) then return NOT_FOUND end
  return OK, owner
end

-- Whether `caller` may report on job `id` (CHECK_REPORT, TRANSITION). In a Redis that lost its
-- data (no `initialised` marker) a refusal is NOT_READY instead, as a job not found there is:
-- the token and the node's index went with the data, and the job may be in the snapshot.
-- Restored, the report is checked again (the token, never in the snapshot, is refused then:
-- its agent registers again and retries). Only a refusal pays the EXISTS.
local function job_access(caller, id)
  local access, owner = owned_access(caller, id, "job")
  if access ~= OK and redis.call("EXISTS", K.initialised) == 0 then return NOT_READY end
  return access, owner
end

-- The same for a service (PATCH /services/{id}): its node's index of services.
local function service_access(caller, id)
  return owned_access(caller, id, "service")
end
"""

# A job's record is its head, whole unless a part of it is large (models/record.py): a
# reader gets the heads and the API reads the parts stored apart that a head names (never
# through a script: Redis copies and hashes every byte that enters or leaves one).
# MGET in chunks: Lua's unpack() fails beyond a few thousand values (a 10 000-job page).
# A page also stops once it holds `budget` bytes (at least one job).
READ = (
    f"local MAX_JOB_NUMBER = {MAX_JOB_NUMBER}\n"
    + """
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

-- Each schedule of `names` with its record, {name, record, ...}; a name without one (deleted
-- meanwhile) is left out.
local function schedule_pairs(names)
  if #names == 0 then return {} end
  local records = redis.call("HMGET", K.schedules, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    if records[i] then
      out[#out + 1] = name
      out[#out + 1] = records[i]
    end
  end
  return out
end

-- A job's number N, its score in every index but a queue: read from its id job-N
-- (models.job_number) rather than from the index, which keeps it for any other id (a row of
-- an old snapshot file: snapshot/db.py NON_JOB_SCORE).
local function number_of(id)
  local n = tonumber(string.match(id, "^job%-(%d+)$"))
  if n and n <= MAX_JOB_NUMBER then return n end
  return tonumber(redis.call("ZSCORE", K.all_jobs, id))
end

local function load_job(id)
  local raw = redis.call("GET", K.job(id))
  return raw and cjson.decode(raw), raw
end
"""
)

# Long-polls (connection/notify.py) wait on these channels; a PUBLISH nobody listens to
# costs Redis one hash lookup.
WAKE = """
local function wake_node(node) redis.call("PUBLISH", K.node_channel(node), "") end
local function wake_job(id) redis.call("PUBLISH", K.job_channel(id), "") end
"""

# The final statuses (models.FINAL_STATUSES): FINAL[status] is true for them. ENDINGS[name]
# is {status, failure_reason} (models.ENDINGS).
FINAL = "local FINAL = {" + ", ".join(f"{s} = true" for s in FINAL_STATUSES) + "}"
NOT_STARTED_TABLE = "local NOT_STARTED = {" + ", ".join(f"{s} = true" for s in NOT_STARTED) + "}"
ENDING_TABLE = (
    "local ENDINGS = {"
    + ", ".join(f'{name} = {{"{status}", "{why}"}}' for name, (status, why) in ENDINGS.items())
    + "}"
)

# The ids of the index answering GET /jobs with these filters (each may be ""): LIST's page,
# and the jobs the UI's search looks through (SEARCH). In job number order ("asc": numbers
# above `bound`), or newest first ("desc": below `bound`, 0 from the newest). A node's pending
# jobs are listed in its queue's order instead (places.py queue_score: higher priority first,
# oldest first within one; "desc" from the back), from the place of job-`bound` in it (its
# number and priority: priority 0 for a job not stored), so a page starts just after the
# last job of the one before. At most `limit` ids. A schedule's jobs (`schedule` not "") are
# its index's, by number: the API takes no node or status with it (no index per schedule and
# status: every change of status would have to keep one).
LISTING = """
-- The schedule whose firing made the decoded `job` (workers/firing.py), else nil.
local function made_by(job)
  local name = job.schedule
  if type(name) == "string" and name ~= "" then return name end
end

local function listing_ids(node, status, schedule, bound, order, limit)
  local index = K.all_jobs
  if schedule ~= "" then
    index = K.schedule_jobs(schedule)
  elseif node ~= "" and status ~= "" then
    index = K.node_status(node, status)
  elseif node ~= "" then
    index = K.node_jobs(node)
  elseif status ~= "" then
    index = K.status(status)
  end
  local from = "(" .. bound
  if bound == "0" then
    from = order == "desc" and "+inf" or "-inf"
  elseif schedule == "" and node ~= "" and status == "pending" then
    local job = load_job("job-" .. bound)
    from = string.format("(%.17g", queue_score(tonumber(bound), job and job.priority))
  end
  if order == "desc" then
    return redis.call("ZREVRANGEBYSCORE", index, from, "-inf", "LIMIT", 0, limit)
  end
  return redis.call("ZRANGEBYSCORE", index, from, "+inf", "LIMIT", 0, limit)
end
"""

# Drains (docs/GUIDE.md, Drain): a node in {P}:nodes:drained, by "operator" (the key's, for
# maintenance) or "stopping" (its own agent's clean stop, which its next registration lifts),
# is never a placement candidate (place.py is_drained) and starts nothing new (POLL). Every
# change is counted, so the snapshot writes the hash only when it changed (snapshot/drains.py).
# Its jobs not running, and a retry of one that ran there, leave it through placement.
DRAINS = """
local function set_drain(node, by)
  redis.call("HSET", K.drained_nodes, node, by)
  redis.call("HINCRBY", K.drained_changes, "made", 1)
  refresh_load(node)  -- out of the placeable nodes
end

-- A candidate again: among the placeable nodes, the unplaced jobs flagged for the next pass
-- (it may fit them), its poll woken (what stayed in its queue starts again).
local function lift_drain(node)
  if redis.call("HDEL", K.drained_nodes, node) == 1 then
    redis.call("HINCRBY", K.drained_changes, "made", 1)
    refresh_load(node)
    flag_unplaced()
    wake_node(node)
  end
end

-- Where a job leaving a drained node goes (not bound yet): with the built-in registry
-- (`builtin`) to placement, i.e. to no node yet (""), placed as an unplaced job is (a
-- pending one by the next PLACE_UNPLACED pass, a delayed one when due, a waiting one when
-- its wait ends: place.py place); an external registry's nodes carry no room nor load, so
-- the next live one, round-robin, or nil (none: it stays).
local function off_drained(builtin, cutoff)
  if builtin then return "" end
  return next_live(live_nodes(cutoff))
end

local OFF_STATUSES = {"pending", "waiting", "delayed"}

-- DRAIN_NODE's move: the drained node's jobs not running and not instance-bound leave it
-- (off_drained; a pending one is placed at once, so the answer says where: place), keeping
-- their status, in queue order, up to `limit` or `pace` (life.py move_each): {id, from,
-- to ("": none yet), ...}, and how many stayed bound to it (instance-bound, past `limit` or
-- `pace`, or no live node of an external registry: a drain again moves them).
local function move_off(node, builtin, cutoff, limit, pace)
  local moved, stayed, failed = {}, 0, {}
  for _, status in ipairs(OFF_STATUSES) do
    move_each(node, status, limit, moved, function(id, n, job)
      if builtin and status == "pending" then
        return place(id, n, job, cutoff, failed) or ""  -- an ask none took: read once
      end
      local to = off_drained(builtin, cutoff)
      if to then rebind(id, n, job, status, to) end
      return to
    end, pace)
    if pace.left <= 0 then break end
  end
  for _, status in ipairs(OFF_STATUSES) do
    stayed = stayed + redis.call("ZCARD", K.node_status(node, status))
  end
  return moved, stayed
end

-- The node a job tried again goes to (a failed report; a timeout under its own policy): its
-- own, unless that is drained; then off_drained (placed by the next pass, about a tick
-- later: a report's script carries none of find_node's Lua), its own still when an external
-- registry has no live node, or when it is bound to an instance there.
local function retry_node(job, builtin, cutoff)
  local node = job.node_id
  if (job.instance_id or "") ~= "" or not is_drained(node) then return node end
  return off_drained(builtin, cutoff) or node
end
"""

# A compute node deleted from the built-in registry stays in nodes:compute, as lost long ago,
# only while jobs not ended are bound to it, for the node-loss rule to find them (LOSE_RUNNING,
# REQUEUE_LOST; a waiting or delayed job becomes pending on its node later). Then it leaves,
# so placement, the UI, /metrics and the sweep know only the nodes that exist.
GONE = (
    "local UNFINISHED = {"
    + ", ".join(f'"{s}"' for s in STATUSES if s not in FINAL_STATUSES)
    + """}
local function forget_if_gone(node)
  if redis.call("HEXISTS", K.nodes, node) == 1 then return end
  for _, status in ipairs(UNFINISHED) do
    if redis.call("EXISTS", K.node_status(node, status)) == 1 then return end
  end
  redis.call("ZREM", K.nodes_compute, node)
  redis.call("DEL", K.node_room(node), K.node_held(node))
end
"""
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


# A shard's next job or service number (store/shards.py Numbering): its counter `key` kept
# above `floor`, times the shard count, plus its index (unsharded: the counter itself).
NUMBERING = """
local function draw_number(key, shards, shard, floor)
  local drawn = redis.call("INCR", key)
  if drawn <= tonumber(floor) then
    drawn = tonumber(floor) + 1
    redis.call("SET", key, drawn)
  end
  return drawn * tonumber(shards) + tonumber(shard)
end
"""

LIBRARY: dict[str, str] = dict(
    pair
    for chunk in (
        FINAL,
        NOT_STARTED_TABLE,
        ENDING_TABLE,
        NODE_ACCESS,
        NODES,
        PLACES_LUA,
        READ,
        PARTS,
        ENCODE,
        TIME,
        WAKE,
        SERIES,
        ATTEMPTS,
        UNITS,
        LIFE,
        SETTLE,
        NODE_LOSS,
        PLACE,
        DRAINS,
        LISTING,
        GONE,
        NUMBERING,
    )
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

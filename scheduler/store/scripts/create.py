"""A new job's scripts, each with its call: CREATE_JOB, and CREATE_AFTER for one that runs
after others (two scripts, so a plain submit's holds none of the dependencies' Lua). jobs.py,
the request path's module, names them too."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.models.job import MAX_WAITERS, Job, due_of
from scheduler.models.record import Parts, creation_parts, wire
from scheduler.models.wire import InvalidInput, rfc3339
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.errors import IdempotencyMismatch, StagedPartLost, StoreNotReady
from scheduler.store.keys import Keys
from scheduler.store.scripts import codes
from scheduler.store.scripts.script import Call, Script
from scheduler.store.shards import UNSHARDED, Numbering


@dataclass(frozen=True, slots=True)
class Created:
    job: bytes
    duplicate: bool


def _created(reply: list[Any], spec: bytes = b"") -> Created:
    """A create's reply: {OK, head} of the new job, whose `spec` apart (b"": none) the
    caller staged (the call knows it: create_job), or {DUPLICATE, head} of the job made
    before ("": gone; its parts apart are the store's to read: JobStore.create)."""
    code = reply[0]
    codes.check_staged(code)
    if code == codes.NOT_READY:
        raise StoreNotReady()
    if code == codes.NO_NODES:
        raise NoHealthyNodes()
    if code == codes.MISMATCH:
        raise IdempotencyMismatch()
    if code == codes.UNKNOWN_AFTER:
        raise InvalidInput(f"invalid after: {str(reply[1], 'utf-8')} is not a job")
    if code == codes.TOO_MANY:
        dep = str(reply[1], "utf-8")
        raise InvalidInput(f"invalid after: {MAX_WAITERS} jobs already wait for {dep}")
    if code == codes.DUPLICATE:
        return Created(job=reply[1], duplicate=True)
    return Created(job=wire(reply[1], spec or None), duplicate=False)


# What a create (or a pass: PASS_KEY) raises when it made nothing and the key holds no job:
# NOT_READY, NO_NODES, NOT_STAGED and the refusals of `after`. Not IdempotencyMismatch: the
# key holds another request's job there.
UNMADE: tuple[type[Exception], ...] = (StoreNotReady, NoHealthyNodes, StagedPartLost, InvalidInput)


@dataclass(frozen=True, slots=True)
class Dedup:
    """What makes a creation idempotent: the job made under `key` (in `space`: "sqs", an SQS
    message; "submit", a POST /jobs Idempotency-Key) for `ttl` seconds, and the fingerprint
    of the request that made it ("" for SQS, whose key covers the body already)."""

    space: str
    key: str
    ttl: int
    fingerprint: str = ""

    def redis_key(self, keys: Keys) -> str:
        """The key that remembers what `key` made (the scripts': _DEDUP_KEY)."""
        return _SPACE_KEYS.get(self.space, _OTHER_SPACES)(keys, self.key)


NO_DEDUP = Dedup("", "", 0)

# The Keys member that remembers an idempotency key of each space (Dedup.space); any other
# space's is a POST /jobs Idempotency-Key's. Dedup.redis_key reads it, and the scripts' Lua
# (_DEDUP_KEY, of dedup_space and dedup_key) is written from it: one choice for both.
_SPACE_KEYS: dict[str, Callable[[Keys, str], str]] = {"sqs": Keys.sqs_message}
_OTHER_SPACES = Keys.submission
_DEDUP_KEY = (
    "".join(
        f'dedup_space == "{space}" and K.{of.__name__}(dedup_key) or '
        for space, of in _SPACE_KEYS.items()
    )
    + f"K.{_OTHER_SPACES.__name__}(dedup_key)"
)


@dataclass(frozen=True, slots=True)
class Asks:
    """What a new job asks of its node (docs/GUIDE.md, Placement): the record's cpus, memory_mb and
    node_selector, passed apart so the create script need not decode the record."""

    cpus: int = 0
    memory_mb: int = 0
    node_selector: Mapping[str, str | list[str]] = field(default_factory=dict)


NO_ASKS = Asks()

# The mark of an idempotency key a shard passed on to a later shard (store/shard_placement.py).
ELSEWHERE = "-"

# A Redis that came back empty must get its snapshot back before a new job takes an id the
# snapshot already holds, or a key is marked in it (snapshot.restore_if_empty sets the
# marker). CREATE_JOB's and PASS_KEY's first check.
_READY = """if redis.call("EXISTS", K.initialised) == 0 then return unmade({NOT_READY}) end
"""

# A key seen before (`seen`, the value of its key `dedup`): the job it made, MISMATCH for
# another request, or passed on to a later shard. CREATE_JOB's and PASS_KEY's check.
_KEY_SEEN = """  if seen == ELSEWHERE then return unmade({NO_NODES}) end  -- made on a later shard
  if seen then
    local id, made_by = string.match(seen, "^(%S+) ?(.*)$")
    if made_by ~= fingerprint then return unmade({MISMATCH}) end
    return unmade({DUPLICATE, redis.call("GET", K.job(id)) or ""})
  end
"""

# A new job's script, shared by CREATE_JOB and CREATE_AFTER (one that runs after others): two
# scripts, so a plain submit's holds none of the dependencies' Lua (about a third of its cost).
_NEW_JOB = """
-- fields: the members of the head of the job's record (models/record.py), without job_id,
-- node_id and pending_reason, which this writes before them; spec_staged: the token of
-- its spec staged apart ("": none, the head holds it), renamed into place, or dropped
-- when nothing is made (the id drawn here, the node placed here: place.py pick_node, by mode and the job's asks: cpus, memory_mb and
-- selector, the record's, its node_selector as JSON or ""). A job no node can take now is
-- still made, pending unplaced (node_id "", place.py) with its pending_reason; only one
-- that asks nothing answers NO_NODES when no compute node is live (the original's 503). A
-- delayed job that asks a fit is placed when due. due: "" for a job pending now, else the epoch
-- its run_at says: it is delayed until then (its record says so too). priority: the
-- record's, its place in the node's queue (places.py queue_score). With dedup_ttl > 0,
-- dedup_key is an idempotency key (dedup_space "sqs": an SQS message, else a POST /jobs
-- Idempotency-Key) remembered with the job's id and the request's fingerprint: a replay
-- answers the job it made, a replay with another fingerprint MISMATCH, and neither creates
-- anything. schedule: the schedule that made it ("": none), whose index it enters.
-- Returns {OK, head} | {DUPLICATE, the head of the job made ("": gone)} | {MISMATCH}
--   | {NOT_STAGED} (the staged spec is gone)
--   | {NO_NODES} | {NOT_READY}{AFTER_CODES}.
-- elsewhere = 1: another shard may take the job (store/sharded.py): with no node for it,
-- NO_NODES rather than made unplaced, its idempotency key then marked ELSEWHERE.
local ELSEWHERE = "{ELSEWHERE}"
local function unmade(reply)
  if spec_staged ~= "" then redis.call("DEL", K.staged(spec_staged)) end
  return reply
end
{READY}if spec_staged ~= "" and redis.call("EXISTS", K.staged(spec_staged)) == 0 then
  return {NOT_STAGED}
end
local dedup = false
if tonumber(dedup_ttl) > 0 then
  dedup = {DEDUP_KEY}
  local seen = redis.call("GET", dedup)
{KEY_SEEN}end
{AFTER_CHECKS}local ask = {cpus = tonumber(cpus), memory_mb = tonumber(memory_mb),
  node_selector = selector ~= "" and cjson.decode(selector) or nil}
local node, reason = nil, nil
if due == "" or not needs_fit(ask) then
  node, reason = pick_node(mode, candidates, ask, tonumber(now) - tonumber(node_ttl))
elseif elsewhere == "1" then
  -- A delayed job that asks a fit is placed when due. Where other shards may take it, it
  -- still needs a node here that matches it (room or not): with none it passes on, as one
  -- due now does, rather than wait where no node may ever take it.
  local _, why = pick_node(mode, candidates, ask, tonumber(now) - tonumber(node_ttl))
  if why == REASON.no_fit or why == REASON.no_nodes then reason = why end
end
if not node and reason and (mode ~= "live" or reason == REASON.no_nodes and not needs_fit(ask)
    or elsewhere == "1") then
  -- a replay of the key passes on here to the shard that made it (store/sharded.py)
  if dedup and elsewhere == "1" then
    redis.call("SET", dedup, ELSEWHERE, "EX", tonumber(dedup_ttl))
  end
  return unmade({NO_NODES})
end
node = node or ""
local n = draw_number(K.job_seq, shards, shard, id_floor)
local id = "job-" .. n
-- Its head: the ids and, pending unplaced, why (models.job PENDING_REASONS), then the
-- record's other fields (its head's members).
local unplaced = due == "" and node == "" and reason
local reason_field = unplaced and ',"pending_reason":' .. cjson.encode(reason) or ""
local job = '{"job_id":' .. cjson.encode(id) .. ',"node_id":' .. cjson.encode(node) .. reason_field
  .. "," .. fields .. "}"
"""
_NEW_JOB = _NEW_JOB.replace("{READY}", _READY).replace("{DEDUP_KEY}", _DEDUP_KEY)
_NEW_JOB = _NEW_JOB.replace("{KEY_SEEN}", _KEY_SEEN).replace("{ELSEWHERE}", ELSEWHERE)
_STORE_NEW = """
redis.call("SET", K.job(id), job)
if spec_staged ~= "" then
  redis.call("RENAME", K.staged(spec_staged), K.job_spec(id))
  redis.call("PERSIST", K.job_spec(id))
end
local where = {status = status, node_id = node, priority = priority, cpus = ask.cpus,
  memory_mb = ask.memory_mb, schedule = schedule}
enter_place(id, n, where, due, redis.call)
redis.call("SADD", K.dirty, id)
count_minute(now, "submitted")
if dedup then
  local value = fingerprint == "" and id or id .. " " .. fingerprint
  redis.call("SET", dedup, value, "EX", tonumber(dedup_ttl))
end
if status == "pending" and node ~= "" then wake_node(node) end
"""
_ARGV = (
    "fields spec_staged due priority mode now node_ttl dedup_space dedup_key dedup_ttl fingerprint "
    "cpus memory_mb selector shards shard id_floor elsewhere schedule"
)

CREATE_JOB = Script(
    "CREATE_JOB",
    f"{_ARGV} *candidates",
    _NEW_JOB.replace("{AFTER_CODES}", "").replace("{AFTER_CHECKS}", "")
    + 'local status = due == "" and "pending" or "delayed"'
    + _STORE_NEW
    + "return {OK, job}\n",
    _created,
)

CREATE_AFTER = Script(
    "CREATE_AFTER",
    f"{_ARGV} after max_waiters stamp *candidates",
    _NEW_JOB.replace(
        "{AFTER_CODES}",
        " | {UNKNOWN_AFTER, id} | {TOO_MANY, id waited for by max_waiters already}\n-- after:"
        " the jobs it runs after (JSON): `waiting` until they are done; failed at once"
        " (dependency_failed) if one has failed",
    ).replace(
        "{AFTER_CHECKS}",
        """local deps = cjson.decode(after)
for _, dep in ipairs(deps) do
  if not redis.call("ZSCORE", K.all_jobs, dep) then return unmade({UNKNOWN_AFTER, dep}) end
end
local crowded = crowded_dependency(deps, max_waiters)
if crowded then return unmade({TOO_MANY, crowded}) end
""",
    )
    + """local waits, failed = wait_for(id, deps)
local status = "pending"
if waits > 0 or failed then
  status = "waiting"
  local decoded = cjson.decode(job)
  decoded.status, decoded.pending_reason = "waiting", nil
  if needs_fit(ask) then node, decoded.node_id = "", "" end  -- placed once its wait ends
  job = encode(decoded)
end"""
    + _STORE_NEW
    + """if failed then
  local decoded = cjson.decode(job)
  set_output(id, decoded, "stderr", "dependency " .. failed .. " ended failed")
  return {OK, finish(id, n, decoded, "dependency_failed", now, stamp)}
end
return {OK, job}
""",
    _created,
)


PASS_KEY = Script(
    "PASS_KEY",
    "dedup_space dedup_key dedup_ttl fingerprint",
    """
-- A keyed create's pass over a shard that may not make its job (store/shard_placement.py
-- keyed): the Redis and the key checked as CREATE_JOB checks them, and where the key is new,
-- marked ELSEWHERE as a shard with no node for the job marks it, so a replay passes on from
-- here too.
-- Returns {DUPLICATE, the head of the job made ("": gone)} | {MISMATCH} | {NO_NODES}
--   | {NOT_READY}
local ELSEWHERE = "{ELSEWHERE}"
local function unmade(reply) return reply end
{READY}local dedup = {DEDUP_KEY}
local seen = redis.call("GET", dedup)
{KEY_SEEN}redis.call("SET", dedup, ELSEWHERE, "EX", tonumber(dedup_ttl))
return {NO_NODES}
""".replace("{READY}", _READY)
    .replace("{DEDUP_KEY}", _DEDUP_KEY)
    .replace("{KEY_SEEN}", textwrap.dedent(_KEY_SEEN))
    .replace("{ELSEWHERE}", ELSEWHERE),
    _created,
)


def pass_key(dedup: Dedup) -> Call[Created]:
    return PASS_KEY.call(
        dedup_space=dedup.space,
        dedup_key=dedup.key,
        dedup_ttl=dedup.ttl,
        fingerprint=dedup.fingerprint,
    )


UNMARK_KEY = Script(
    "UNMARK_KEY",
    "dedup_space dedup_key",
    """
-- A keyed create's mark taken back when no shard made its job (store/shard_placement.py
-- keyed): only while it reads ELSEWHERE, never the job another request under the key made
-- here since.
-- Returns 1 (taken back) | 0 (no mark: left as it is)
local dedup = {DEDUP_KEY}
if redis.call("GET", dedup) ~= "{ELSEWHERE}" then return 0 end
redis.call("DEL", dedup)
return 1
""".replace("{DEDUP_KEY}", _DEDUP_KEY).replace("{ELSEWHERE}", ELSEWHERE),
    lambda reply: reply == 1,
)


def unmark_key(dedup: Dedup) -> Call[bool]:
    return UNMARK_KEY.call(dedup_space=dedup.space, dedup_key=dedup.key)


def create_job(
    record: bytes,
    placement: Placement,
    now: float,
    node_ttl: float,
    dedup: Dedup = NO_DEDUP,
    due: float | None = None,
    priority: int = 0,
    after: Sequence[str] = (),
    asks: Asks = NO_ASKS,
    spec: bytes = b"",
    spec_staged: str = "",
    numbering: Numbering = UNSHARDED,
    schedule: str = "",
) -> Call[Created]:
    """`record` is the new job's head (models/record.py) without job_id and node_id; `spec`
    its spec stored apart (b"": in the head), staged under the token `spec_staged` (the
    store stages it: JobStore.create); `due`, when it is delayed, the epoch of its run_at;
    `priority`, `after` and `asks`, the record's; `numbering`, how the shard it is made on
    draws its number (store/shards.py); `schedule`, the schedule that made it (its index)."""
    args: dict[str, Any] = dict(
        fields=_members(record), spec_staged=spec_staged, due="" if due is None else due,
        priority=priority, mode=placement.mode, now=now, node_ttl=node_ttl, dedup_space=dedup.space,
        dedup_key=dedup.key, dedup_ttl=dedup.ttl if dedup.key else 0,
        fingerprint=dedup.fingerprint, candidates=placement.candidates, cpus=asks.cpus,
        memory_mb=asks.memory_mb,
        selector=json.dumps(asks.node_selector) if asks.node_selector else "",
        shards=numbering.count, shard=numbering.index, id_floor=numbering.floor,
        elsewhere=int(placement.elsewhere), schedule=schedule,
    )  # fmt: skip
    if not after:
        call = CREATE_JOB.call(**args)
    else:
        after_args = {"after": json.dumps(list(after)), "max_waiters": MAX_WAITERS}
        call = CREATE_AFTER.call(**args, **after_args, stamp=rfc3339(now))
    return dataclasses.replace(call, known=(spec,))


def _members(head: bytes) -> bytes:
    """The members of a head's JSON object, which the script writes into the object it makes
    (its ids first: CREATE_JOB `fields`)."""
    if not (head.startswith(b"{") and head.endswith(b"}")):
        raise ValueError(f"not a JSON object: {head[:20]!r}")
    return head[1:-1]


def create_job_of(
    job: Job,
    placement: Placement,
    now: float,
    node_ttl: float,
    dedup: Dedup = NO_DEDUP,
    spec_staged: str = "",
    parts: Parts | None = None,
    numbering: Numbering = UNSHARDED,
) -> Call[Created]:
    """CREATE_JOB for a new job (models.job.stamped): its record and what indexes it; its
    spec, when stored apart (`creation_parts(job).spec`, `parts` if the caller has them),
    staged under `spec_staged`."""
    asks = Asks(job.cpus, job.memory_mb, job.node_selector)
    parts = parts or creation_parts(job)
    if parts.spec and not spec_staged:
        raise ValueError("a spec stored apart must be staged (JobStore.create)")
    return create_job(
        parts.head,
        placement,
        now,
        node_ttl,
        dedup,
        due_of(job),
        job.priority,
        job.after,
        asks,
        parts.spec,
        spec_staged,
        numbering,
        job.schedule,
    )

"""The built-in registry's node scripts (REGISTRY_URL unset): nodes register, heartbeat and
leave. Each with its call. (Either registry's drains: drains.py; services: services.py;
the overview the UI and /metrics read: overview.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.models.wire import rfc3339
from scheduler.store.errors import (
    Conflict,
    Forbidden,
    NodeNotFound,
    TooManyNodes,
    Unauthorized,
)
from scheduler.store.scripts import codes, retry
from scheduler.store.scripts.codes import check_found
from scheduler.store.scripts.replies import Lost, Requeued, ids, lost_jobs, requeued
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call, Script


def vouches(caller: str, api_key: str) -> bool:
    """Whether a registration or heartbeat by `caller` is the operator's word for what the
    node says of itself (docs/GUIDE.md, Placement): the key's; with no key set, anyone's (anyone is
    the operator then). Only then is the node's hostname its `node.hostname` label, which
    pins jobs to a host: the join key and a node's own registration vouch for nothing, as
    only an admin sets Kubernetes' node-restriction.kubernetes.io labels."""
    return caller == "key" or not api_key


@dataclass(frozen=True, slots=True)
class Registration:
    """Who registers a node and under which rules (REGISTER_NODE), whether the operator
    vouches for it (`vouches`), and the retry rule that the running jobs of an id passed to a
    new holder follow (the node-loss rule)."""

    caller: str
    agent_auth: str
    key_required: bool
    max_nodes: int
    node_ttl: float
    retries: RetryPolicy
    vouches: bool = False


@dataclass(frozen=True, slots=True)
class Registered:
    """What REGISTER_NODE did: `outcome` "issued" (the fresh token is now the node's), "kept"
    (the caller's own token stays the node's) or "none" (an anonymous re-register: no token
    for it); the jobs of the old holder put back when the id passed to a new holder."""

    outcome: str
    moved: list[Requeued]
    lost: list[Lost]


def _registered(reply: list[Any]) -> Registered:
    code = reply[0]
    if code == codes.UNAUTHORIZED:
        raise Unauthorized()
    if code == codes.TOO_MANY_NODES:
        raise TooManyNodes()
    if code == codes.ROLE_LOCKED:
        raise Forbidden("forbidden: changing a node's role needs its token or the API key")
    if code == codes.TOO_MANY:
        raise Conflict(
            "the node holds more jobs than a registration hands back at once: drain it (POST "
            "/nodes/{id}/drain moves its queue in pieces) or delete it (the sweep moves its "
            "jobs), then register it again"
        )
    return Registered(str(reply[1], "utf-8"), requeued(reply[2]), lost_jobs(reply[3]))


REGISTER_NODE = Script(
    "REGISTER_NODE",
    "node record role now caller agent_auth key_required token_hash max_nodes node_ttl limit "
    f"stamp vouches {retry.ARGV}",
    """
-- POST /nodes/register. Who may (docs/SECURITY.md): a new id, anyone, or with key_required
-- only the key or the join key (caller "join"); an existing id, the operator's key or the
-- node's own token; otherwise, with AGENT_AUTH=open, anyone but without changing the node's
-- role; with AGENT_AUTH=token, no one, but with neither key set (anyone may add a node) anyone
-- once the node is silent for NODE_TTL_SECS. caller is never "open"; token_hash: a fresh
-- token's. An existing id given a fresh token passes to a new holder (hand_over). A compute
-- node's labels, offer (cpu_count, memory_mb) and load are indexed from its record for
-- placement (room.py index_node), and the unplaced jobs may fit it. vouches: "1" when the
-- operator vouches for this registration (vouches()): only a node in nodes:vouched has its
-- hostname as its node.hostname label; the node's own token keeps what was vouched for
-- while it says the hostname the key registered (a node's token claiming another host's name
-- would take the jobs pinned there), anyone else's registration is not vouched for.
-- Returns {OK, "issued" | "kept" | "none", {job moved}, {job lost}} (the fresh token became
-- the node's; the caller's token stays the node's; no token for this caller) | {UNAUTHORIZED}
-- | {TOO_MANY_NODES} | {ROLE_LOCKED} | {TOO_MANY}
local stored = redis.call("HGET", K.nodes, node)
local held = redis.call("HGET", K.node_tokens, node)
local seen_at = tonumber(now)
local moved, lost = {}, {}
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
  redis.call("ZADD", K.nodes_seen, seen_at, node)
  if role == "compute" then
    redis.call("ZADD", K.nodes_compute, seen_at, node)
  else
    redis.call("ZREM", K.nodes_compute, node)
  end
  index_node(node, stored, record)
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
""",
    _registered,
)


def register_node(
    node_id: str,
    node_json: bytes,
    role: str,
    now: float,
    who: Registration,
    token_hash: str,
    limit: int,
) -> Call[Registered]:
    """Register (or re-register) a node; an id passing to a new holder hands its old holder's
    jobs back, at most `limit` of them (more: TOO_MANY, nothing changed)."""
    return REGISTER_NODE.call(
        node=node_id,
        record=node_json,
        role=role,
        now=now,
        caller=who.caller,
        agent_auth=who.agent_auth,
        key_required="1" if who.key_required else "0",
        token_hash=token_hash,
        max_nodes=who.max_nodes,
        node_ttl=who.node_ttl,
        limit=limit,
        stamp=rfc3339(now),
        vouches="1" if who.vouches else "0",
        **who.retries.args(),
    )


def _heartbeat(reply: list[Any]) -> tuple[bytes, list[str]]:
    check_found(reply[0], NodeNotFound)
    blob: bytes = reply[1]
    return blob, ids(reply[2])


HEARTBEAT = Script(
    "HEARTBEAT",
    "node now caller live_cutoff vouches",
    """
-- A compute node heard from again after NODE_TTL_SECS of silence (not live since
-- live_cutoff) may take the unplaced jobs (flagged); one not among the placeable nodes
-- (found dead while away, or registered by a version before placement by fit) and not
-- drained is indexed again from its record (room.py index_node), which flags them too.
-- vouches: as REGISTER_NODE's (with no key set, every heartbeat vouches for the node). A
-- node not vouched for loses the node.hostname label an earlier version gave every node.
-- Returns {OK, node JSON, {cancelling id, ...}} | {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local record = redis.call("HGET", K.nodes, node)
if not record then return {NOT_FOUND} end
if redis.call("SISMEMBER", K.nodes_vouched, node) == 0 then
  if vouches == "1" then
    redis.call("SADD", K.nodes_vouched, node)
    index_node(node, record, record)
  else
    local hostname = cjson.decode(record).hostname
    if type(hostname) == "string" and hostname ~= "" then
      redis.call("SREM", K.label_nodes("node.hostname=" .. hostname), node)
    end
  end
end
redis.call("ZADD", K.nodes_seen, now, node)
local seen = redis.call("ZSCORE", K.nodes_compute, node)
if seen then
  redis.call("ZADD", K.nodes_compute, now, node)
  if not redis.call("ZSCORE", K.nodes_load, node) and not is_drained(node) then
    index_node(node, nil, record)  -- found dead while away, or registered before placement
  elseif tonumber(seen) < tonumber(live_cutoff) then
    flag_unplaced()
  end
end
return {OK, record, redis.call("ZRANGE", K.node_status(node, "cancelling"), 0, 99)}
""",
    _heartbeat,
)


def heartbeat(
    node_id: str, now: float, caller: str, node_ttl: float, vouched: bool
) -> Call[tuple[bytes, list[str]]]:
    """The node's record, and the ids of its jobs being cancelled. `vouched`: vouches()."""
    return HEARTBEAT.call(
        node=node_id,
        now=now,
        caller=caller,
        live_cutoff=now - node_ttl,
        vouches="1" if vouched else "0",
    )


NODE_CALLER = Script(
    "NODE_CALLER",
    "node caller",
    """
-- Whether `caller` may make node `node`'s own calls (GET /instances in token mode): the key,
-- or the node's token. Returns OK | UNAUTHORIZED | FORBIDDEN.
return node_access(caller, node)
""",
    codes.check_access,
    read_only=True,
)


def node_caller(node_id: str, caller: str) -> Call[None]:
    """Raises Unauthorized (no live token) or Forbidden (another node's) unless `caller` is
    the key or node `node_id`'s token."""
    return NODE_CALLER.call(node=node_id, caller=caller)


def _deleted(reply: list[Any]) -> list[Requeued]:
    check_found(reply[0], NodeNotFound)
    return requeued(reply[1:])


DELETE_NODE = Script(
    "DELETE_NODE",
    "node live_cutoff limit caller",
    """
-- A node leaves (its agent stopping cleanly, or the operator's key): no job is placed on it
-- from now on (its labels and offer go: room.py index_node), its token stops working at
-- once, and its pending jobs (not instance-bound) move to live nodes at once, up to `limit`
-- (one that asks a fit waits unplaced for the next placement pass). A compute node that
-- still has jobs not ended bound to it stays in nodes:compute as lost long ago (score 0),
-- so the sweep treats it as a lost node: its running jobs (none after a clean stop) and any
-- pending jobs beyond `limit` follow, and it leaves once none is left (forget_if_gone); one
-- with none leaves at once.
-- A drain of its own clean stop ends with it; an operator's stays, so the id comes back
-- drained (its agent restarting after maintenance) until the operator undrains it.
-- caller: "key" or the node's token.
-- Returns {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
--   | {OK, job id, from node, to node, ...} for each job moved.
local access = node_access(caller, node)
if access ~= OK then return {access} end
local held = redis.call("HGET", K.node_tokens, node)
if held then redis.call("HDEL", K.tokens, held) end
redis.call("HDEL", K.node_tokens, node)
local stored = redis.call("HGET", K.nodes, node)
if not stored then return {NOT_FOUND} end
redis.call("HDEL", K.nodes, node)
redis.call("ZREM", K.nodes_seen, node)
redis.call("SREM", K.nodes_vouched, node)
if redis.call("HGET", K.drained_nodes, node) == "stopping" then lift_drain(node) end
local moved = {}
if redis.call("ZSCORE", K.nodes_compute, node) then
  redis.call("ZADD", K.nodes_compute, 0, node)
  index_node(node, stored, nil)
  move_pending(node, live_nodes(live_cutoff), tonumber(limit), moved, pace_of(SETTLE_UNITS))
  forget_if_gone(node)
end
return {OK, unpack(moved)}
""",
    _deleted,
)


def delete_node(
    node_id: str, now: float, node_ttl: float, limit: int, caller: str
) -> Call[list[Requeued]]:
    """Deregister a node; its pending jobs (up to `limit`) move to live nodes now."""
    return DELETE_NODE.call(node=node_id, live_cutoff=now - node_ttl, limit=limit, caller=caller)


def _listed(reply: int) -> bool:
    return bool(reply)


REGISTERED = Script(
    "REGISTERED",
    "node builtin",
    """
-- Whether a registry lists the node: the built-in one's nodes (builtin "1"), or the compute
-- nodes the sweep saw in REGISTRY_URL's (nodes:compute). Returns 1 | 0
if builtin == "1" then return redis.call("HEXISTS", K.nodes, node) end
return redis.call("ZSCORE", K.nodes_compute, node) and 1 or 0
""",
    _listed,
    read_only=True,
)


def registered(node_id: str, builtin: bool) -> Call[bool]:
    """Whether node `node_id` is registered (REGISTERED): only such a node's long-poll is
    held (store/jobs.py poll_wait)."""
    return REGISTERED.call(node=node_id, builtin="1" if builtin else "0")

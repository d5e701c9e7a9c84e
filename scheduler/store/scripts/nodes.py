"""The built-in registry's scripts (REGISTRY_URL unset): nodes register, heartbeat and leave;
their services. Each with its call. (The overview the UI and /metrics read: overview.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.models.wire import rfc3339
from scheduler.store.errors import (
    Conflict,
    Forbidden,
    NodeNotFound,
    ServiceNotFound,
    TooManyNodes,
    TooManyServices,
    Unauthorized,
)
from scheduler.store.scripts import codes, retry
from scheduler.store.scripts.codes import check_access, check_found
from scheduler.store.scripts.replies import Lost, Requeued, ids, lost_jobs, requeued
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Registration:
    """Who registers a node and under which rules (REGISTER_NODE), and the retry rule that the
    running jobs of an id passed to a new holder follow (the node-loss rule)."""

    caller: str
    agent_auth: str
    key_required: bool
    max_nodes: int
    node_ttl: float
    retries: RetryPolicy


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
            "the node holds more jobs than a registration hands back at once: delete it, and "
            "register it again once the sweep has moved its jobs"
        )
    return Registered(str(reply[1], "utf-8"), requeued(reply[2]), lost_jobs(reply[3]))


REGISTER_NODE = Script(
    "REGISTER_NODE",
    "node record role now caller agent_auth key_required token_hash max_nodes node_ttl limit "
    f"stamp {retry.ARGV}",
    """
-- POST /nodes/register. Who may (README, "Security"): a new id, anyone, or with key_required
-- only the key or the join key (caller "join"); an existing id, the operator's key or the
-- node's own token; otherwise, with AGENT_AUTH=open, anyone but without changing the node's
-- role; with AGENT_AUTH=token, no one, but with neither key set (anyone may add a node) anyone
-- once the node is silent for NODE_TTL_SECS. caller is never "open"; token_hash: a fresh
-- token's. An existing id given a fresh token passes to a new holder (hand_over).
-- Returns {OK, "issued" | "kept" | "none", {job moved}, {job lost}} (the fresh token became
-- the node's; the caller's token stays the node's; no token for this caller) | {UNAUTHORIZED}
-- | {TOO_MANY_NODES} | {ROLE_LOCKED} | {TOO_MANY}
local stored = redis.call("HGET", K.nodes, node)
local held = redis.call("HGET", K.node_tokens, node)
local seen_at = tonumber(now)
local moved, lost = {}, {}
local function save()
  redis.call("HSET", K.nodes, node, record)
  redis.call("ZADD", K.nodes_seen, seen_at, node)
  if role == "compute" then
    redis.call("ZADD", K.nodes_compute, seen_at, node)
  else
    redis.call("ZREM", K.nodes_compute, node)
  end
end
local function issue()
  if held then redis.call("HDEL", K.tokens, held) end
  redis.call("HSET", K.node_tokens, node, token_hash)
  redis.call("HSET", K.tokens, token_hash, node)
  save()
  return {OK, "issued", moved, lost}
end
-- The id passes to a new holder: what was queued for the old one goes back to placement, as
-- when a node is lost: its pending, waiting and delayed jobs to the other live nodes, its
-- running ones under the node-loss rule. With no other live node they stay, as they would go
-- to the next node up. Returns TOO_MANY, changing nothing, past `limit` jobs.
local function hand_over()
  if not stored or not redis.call("ZSCORE", K.nodes_compute, node) then return nil end
  local statuses, count = {"pending", "waiting", "delayed", "running"}, 0
  for _, status in ipairs(statuses) do
    count = count + redis.call("ZCARD", K.node_status(node, status))
  end
  if count > tonumber(limit) then return TOO_MANY end
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
  save()
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
save()
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
        **who.retries.args(),
    )


def _heartbeat(reply: list[Any]) -> tuple[bytes, list[str]]:
    check_found(reply[0], NodeNotFound)
    blob: bytes = reply[1]
    return blob, ids(reply[2])


HEARTBEAT = Script(
    "HEARTBEAT",
    "node now caller",
    """
-- Returns {OK, node JSON, {cancelling id, ...}} | {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local record = redis.call("HGET", K.nodes, node)
if not record then return {NOT_FOUND} end
redis.call("ZADD", K.nodes_seen, now, node)
if redis.call("ZSCORE", K.nodes_compute, node) then
  redis.call("ZADD", K.nodes_compute, now, node)
end
return {OK, record, redis.call("ZRANGE", K.node_status(node, "cancelling"), 0, 99)}
""",
    _heartbeat,
)


def heartbeat(node_id: str, now: float, caller: str) -> Call[tuple[bytes, list[str]]]:
    """The node's record, and the ids of its jobs being cancelled."""
    return HEARTBEAT.call(node=node_id, now=now, caller=caller)


def _deleted(reply: list[Any]) -> list[Requeued]:
    check_found(reply[0], NodeNotFound)
    return requeued(reply[1:])


DELETE_NODE = Script(
    "DELETE_NODE",
    "node live_cutoff limit caller",
    """
-- A node leaves (its agent stopping cleanly, or the operator's key): no job is placed on it
-- from now on, its token stops working at once, and its pending jobs (not instance-bound)
-- move to live nodes at once, up to `limit`. A compute node that still has jobs not ended
-- bound to it stays in nodes:compute as lost long ago (score 0), so the sweep treats it as a
-- lost node: its running jobs (none after a clean stop) and any pending jobs beyond `limit`
-- follow, and it leaves once none is left (forget_if_gone); one with none leaves at once.
-- caller: "key" or the node's token.
-- Returns {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
--   | {OK, job id, from node, to node, ...} for each job moved.
local access = node_access(caller, node)
if access ~= OK then return {access} end
local held = redis.call("HGET", K.node_tokens, node)
if held then redis.call("HDEL", K.tokens, held) end
redis.call("HDEL", K.node_tokens, node)
if redis.call("HDEL", K.nodes, node) == 0 then return {NOT_FOUND} end
redis.call("ZREM", K.nodes_seen, node)
local moved = {}
if redis.call("ZSCORE", K.nodes_compute, node) then
  redis.call("ZADD", K.nodes_compute, 0, node)
  move_pending(node, live_nodes(live_cutoff), tonumber(limit), moved)
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


# Services (built-in registry): what the Rust agent registers for each service job it runs,
# and reads back to learn which to stop (CONTRACT 3.4, 3.5).


def _service_created(reply: list[Any]) -> bytes:
    check_access(reply[0])
    if reply[0] == codes.TOO_MANY_NODES:
        raise TooManyServices()
    blob: bytes = reply[1]
    return blob


CREATE_SERVICE = Script(
    "CREATE_SERVICE",
    "node record caller most most_per_node",
    """
-- record: the service's JSON, starting {"id":"" (the id is drawn here). A node keeps at most
-- most_per_node services: past it, its oldest one that is not running goes; `most` in all.
-- Returns {OK, service JSON} | {UNAUTHORIZED} | {FORBIDDEN} | {TOO_MANY_NODES}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local own = K.node_services(node)
if redis.call("ZCARD", own) >= tonumber(most_per_node) then
  local evicted = false
  for _, old in ipairs(redis.call("ZRANGE", own, 0, -1)) do
    local kept = redis.call("HGET", K.services, old)
    if not kept or cjson.decode(kept).status ~= "running" then
      redis.call("HDEL", K.services, old)
      redis.call("ZREM", own, old)
      evicted = true
      break
    end
  end
  if not evicted then return {TOO_MANY_NODES} end
end
if redis.call("HLEN", K.services) >= tonumber(most) then return {TOO_MANY_NODES} end
local n = redis.call("INCR", K.service_seq)
local id = "svc-" .. n
local service = '{"id":"' .. id .. '"' .. string.sub(record, 9)
redis.call("HSET", K.services, id, service)
redis.call("ZADD", own, n, id)
return {OK, service}
""",
    _service_created,
)


def create_service(
    node_id: str, service_json: bytes, caller: str, most: int, most_per_node: int
) -> Call[bytes]:
    """`service_json` starts with `{"id":""` (models.Service, id first); the script fills it."""
    return CREATE_SERVICE.call(
        node=node_id, record=service_json, caller=caller, most=most, most_per_node=most_per_node
    )


def _service_set(code: int) -> None:
    check_found(code, ServiceNotFound)


SET_SERVICE_STATUS = Script(
    "SET_SERVICE_STATUS",
    "service_id status caller",
    """
-- PATCH /services/{id} (the agent, on its service's exit) or DELETE (the operator: stopped).
-- status: a plain word (models.SERVICE_STATUS_RE).
-- Returns OK | NOT_FOUND | UNAUTHORIZED | FORBIDDEN
local service = redis.call("HGET", K.services, service_id)
if not service then return NOT_FOUND end
local access = node_access(caller, cjson.decode(service).node_id)
if access ~= OK then return access end
local updated = string.gsub(service, '"status":"[%w_%-]*"', '"status":"' .. status .. '"', 1)
redis.call("HSET", K.services, service_id, updated)
return OK
""",
    _service_set,
)


def set_service_status(service_id: str, status: str, caller: str) -> Call[None]:
    return SET_SERVICE_STATUS.call(service_id=service_id, status=status, caller=caller)


def _services(reply: list[Any]) -> list[bytes]:
    check_access(reply[0])
    return list(reply[1:])


LIST_SERVICES = Script(
    "LIST_SERVICES",
    "node status caller",
    """
-- GET /services?node_id=&status= (either filter optional, ""), in id order. A node's list
-- reads only its own services; the operator's list without a node reads them all. caller
-- is checked when a node is named. Returns {OK, service JSON, ...} | {UNAUTHORIZED}
-- | {FORBIDDEN}
local blobs = {}
if node ~= "" then
  local access = node_access(caller, node)
  if access ~= OK then return {access} end
  local listed = redis.call("ZRANGE", K.node_services(node), 0, -1)
  if #listed > 0 then blobs = redis.call("HMGET", K.services, unpack(listed)) end
else
  local all = redis.call("HGETALL", K.services)
  local found = {}
  for i = 1, #all, 2 do found[#found + 1] = {tonumber(string.sub(all[i], 5)), all[i + 1]} end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  for _, entry in ipairs(found) do blobs[#blobs + 1] = entry[2] end
end
local out = {OK}
for _, blob in ipairs(blobs) do
  if blob and (status == "" or cjson.decode(blob).status == status) then
    out[#out + 1] = blob
  end
end
return out
""",
    _services,
    read_only=True,
)


def list_services(node_id: str, status: str, caller: str) -> Call[list[bytes]]:
    return LIST_SERVICES.call(node=node_id, status=status, caller=caller)

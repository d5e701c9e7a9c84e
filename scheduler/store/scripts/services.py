"""The built-in registry's service scripts: what the Rust agent registers for each service job
it runs, and reads back to learn which to stop (CONTRACT 3.4, 3.5). Each with its call."""

from __future__ import annotations

from typing import Any

from scheduler.models.job import job_number
from scheduler.store.errors import NodeNotRegistered, ServiceNotFound, TooManyServices
from scheduler.store.scripts import codes
from scheduler.store.scripts.codes import check_access, check_found
from scheduler.store.scripts.script import Call, Script
from scheduler.store.shards import UNSHARDED, Numbering


def _service_created(reply: list[Any]) -> bytes:
    check_access(reply[0])
    check_found(reply[0], NodeNotRegistered)
    if reply[0] == codes.TOO_MANY_NODES:
        raise TooManyServices()
    blob: bytes = reply[1]
    return blob


# A service's id: svc-N, N drawn as a job's (store/shards.py Numbering).
SERVICE_ID_PREFIX = "svc-"


def service_number(service_id: str) -> int | None:
    """N of a service id svc-N, or None (as models.job.job_number reads job-N)."""
    if not service_id.startswith(SERVICE_ID_PREFIX):
        return None
    return job_number("job-" + service_id.removeprefix(SERVICE_ID_PREFIX))


CREATE_SERVICE = Script(
    "CREATE_SERVICE",
    "node record caller most most_per_node shards shard id_floor",
    """
-- record: the service's JSON, starting {"id":"" (the id is drawn here). A node keeps at most
-- most_per_node services: past it, its oldest one that is not running goes; `most` in all.
-- Only a registered node's (the Rust agent registers first, CONTRACT 3.2): open mode would
-- take services for any id anyone made up.
-- Returns {OK, service JSON} | {UNAUTHORIZED} | {FORBIDDEN} | {NOT_FOUND} | {TOO_MANY_NODES}
local access = node_access(caller, node)
if access ~= OK then return {access} end
if redis.call("HEXISTS", K.nodes, node) == 0 then return {NOT_FOUND} end
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
local n = draw_number(K.service_seq, shards, shard, id_floor)
local id = "{SERVICE_ID_PREFIX}" .. n
local service = '{"id":"' .. id .. '"' .. string.sub(record, 9)
redis.call("HSET", K.services, id, service)
redis.call("ZADD", own, n, id)
return {OK, service}
""".replace("{SERVICE_ID_PREFIX}", SERVICE_ID_PREFIX),
    _service_created,
)


def create_service(
    node_id: str,
    service_json: bytes,
    caller: str,
    most: int,
    most_per_node: int,
    numbering: Numbering = UNSHARDED,
) -> Call[bytes]:
    """`service_json` starts with `{"id":""` (models.Service, id first); the script fills it.
    `numbering`: how the node's shard draws service numbers (store/shards.py)."""
    return CREATE_SERVICE.call(
        node=node_id,
        record=service_json,
        caller=caller,
        most=most,
        most_per_node=most_per_node,
        shards=numbering.count,
        shard=numbering.index,
        id_floor=numbering.floor,
    )


def _service_set(code: int) -> None:
    check_found(code, ServiceNotFound)


SET_SERVICE_STATUS = Script(
    "SET_SERVICE_STATUS",
    "service_id status caller",
    """
-- PATCH /services/{id} (the agent, on its service's exit) or DELETE (the operator: stopped).
-- status: a plain word (models.SERVICE_STATUS_RE).
-- A node's token is checked against its node's index of services before the record is read
-- (library.py, service_access): a stranger's token is 401 and another node's 404, for an
-- existing and a missing service alike.
-- Returns OK | NOT_FOUND | UNAUTHORIZED
local access = service_access(caller, service_id)
if access ~= OK then return access end
local service = redis.call("HGET", K.services, service_id)
if not service then return NOT_FOUND end
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

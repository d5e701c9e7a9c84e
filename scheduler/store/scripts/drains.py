"""Either registry's drains (docs/GUIDE.md, Drain): DRAIN_NODE and UNDRAIN_NODE, each with its
call. (The built-in registry's nodes: nodes.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.store.errors import Forbidden, NodeNotFound
from scheduler.store.scripts import codes
from scheduler.store.scripts.codes import check_found
from scheduler.store.scripts.replies import Requeued, requeued
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Drained:
    """What DRAIN_NODE did: who holds the node's drain now ("operator" or "stopping"), the
    jobs that left the node (`to_node` "" for one no node fits now: it waits unplaced, its
    pending_reason says why, or for a waiting or delayed one, placed when its wait ends or
    it is due), and how many stayed bound to it (bound to an instance there, past the
    call's limit, or no live node of an external registry: a drain again moves more)."""

    moved: list[Requeued]
    stayed: int
    by: str

    @property
    def unplaced(self) -> int:
        return sum(1 for job in self.moved if job.to_node == "")


def _drained(reply: list[Any]) -> Drained:
    check_found(reply[0], NodeNotFound)
    return Drained(requeued(reply[3:]), int(reply[2]), str(reply[1], "utf-8"))


DRAIN_NODE = Script(
    "DRAIN_NODE",
    "node by caller listed now node_ttl limit",
    """
-- POST /nodes/{id}/drain: no job is placed on the node from now on and it starts none
-- (POLL); its jobs not running leave it through placement (library.py move_off, up to
-- `limit`); its running jobs finish there. by: "operator" (the key's) or "stopping" (its
-- own agent's, stopping cleanly: its next registration lifts it). An operator's drain never
-- becomes a stopping one, so the agent's restart does not undo it. caller: "key" or the
-- node's token. listed: "1" when the external registry (REGISTRY_URL) lists the node (the
-- API asked it; its jobs then leave round-robin), else the node must be the built-in
-- registry's: nothing is written for an unknown id.
-- Returns {OK, by, stayed, job id, from node, to node ("": none yet), ...} | {NOT_FOUND}
--   | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
if listed ~= "1" and redis.call("HEXISTS", K.nodes, node) == 0 then return {NOT_FOUND} end
local held = redis.call("HGET", K.drained_nodes, node)
if held ~= "operator" and held ~= by then
  set_drain(node, by)
  held = by
end
local cutoff = tonumber(now) - tonumber(node_ttl)
local moved, stayed = move_off(node, listed ~= "1", cutoff, tonumber(limit), pace_of(SETTLE_UNITS))
return {OK, held, stayed, unpack(moved)}
""",
    _drained,
)


def drain_node(
    node_id: str, by: str, caller: str, listed: bool, now: float, node_ttl: float, limit: int
) -> Call[Drained]:
    return DRAIN_NODE.call(
        node=node_id,
        by=by,
        caller=caller,
        listed="1" if listed else "0",
        now=now,
        node_ttl=node_ttl,
        limit=limit,
    )


def _undrained(reply: list[Any]) -> bool:
    if reply[0] == codes.FORBIDDEN and len(reply) > 1:
        raise Forbidden("forbidden: the operator drained this node; only the key undrains it")
    check_found(reply[0], NodeNotFound)
    return bool(reply[1])


UNDRAIN_NODE = Script(
    "UNDRAIN_NODE",
    "node caller listed",
    """
-- POST /nodes/{id}/undrain: the node is a placement candidate again (library.py lift_drain:
-- the unplaced jobs are flagged for the next placement pass, and its poll hands out what
-- stayed in its queue). The key lifts any drain; a node's token only the one of
-- its own clean stop. A drain left on an id no registry lists any more (the operator's, on
-- a deleted node) can be lifted; an unknown id without one is NOT_FOUND. listed: as
-- DRAIN_NODE's.
-- Returns {OK, 1 (it was drained) | 0} | {NOT_FOUND} | {UNAUTHORIZED} | {FORBIDDEN}
--   | {FORBIDDEN, "operator"} (a node's token and the operator's drain)
local access = node_access(caller, node)
if access ~= OK then return {access} end
local held = redis.call("HGET", K.drained_nodes, node)
if not held then
  if listed ~= "1" and redis.call("HEXISTS", K.nodes, node) == 0 then return {NOT_FOUND} end
  return {OK, 0}
end
if caller ~= "key" and held ~= "stopping" then return {FORBIDDEN, held} end
lift_drain(node)
return {OK, 1}
""",
    _undrained,
)


def undrain_node(node_id: str, caller: str, listed: bool) -> Call[bool]:
    """Whether the node was drained (and is no longer)."""
    return UNDRAIN_NODE.call(node=node_id, caller=caller, listed="1" if listed else "0")

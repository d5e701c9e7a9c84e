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
    _undrained,
)


def undrain_node(node_id: str, caller: str, listed: bool) -> Call[bool]:
    """Whether the node was drained (and is no longer)."""
    return UNDRAIN_NODE.call(node=node_id, caller=caller, listed="1" if listed else "0")

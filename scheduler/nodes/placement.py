"""Which node gets a job: round-robin over the healthy compute nodes, in a stable order.

Pure functions. The ticket comes from one Redis INCR shared by every replica, and the
candidates are sorted by id, so all replicas agree on the rotation (the original iterated a
Go map, which made its "round robin" random). The create script applies the same rule in Lua;
tests check that the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.models.registry import NodeStatus


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a new job may go: `mode` as in the create script's `pick_node`
    (store/scripts/library.py), with its candidates."""

    mode: str
    candidates: tuple[str, ...] = ()

    @classmethod
    def live(cls) -> Placement:
        return cls("live")

    @classmethod
    def among(cls, sorted_ids: Sequence[str]) -> Placement:
        return cls("list", tuple(sorted_ids))

    @classmethod
    def fixed(cls, node_id: str) -> Placement:
        return cls("fixed", (node_id,))


class NoHealthyNodes(LookupError):
    def __str__(self) -> str:
        return "no healthy compute nodes"


def healthy_compute_nodes(nodes: Mapping[str, NodeStatus]) -> list[str]:
    """Ids of the registry's healthy compute nodes, sorted so every replica sees one order."""
    return sorted(
        node_id
        for node_id, node in nodes.items()
        if node.status == "healthy" and node.role in ("compute", "")
    )


def is_live(seen: float, now: float, ttl: float) -> bool:
    """A node heard from (or seen healthy) at `seen` is live at `now` for `ttl` seconds: the
    rule of GET /nodes, the UI and /metrics, and of the scripts' `live_nodes` (a score of at
    least now - ttl), which place jobs by it."""
    return now - seen <= ttl


def live_node_ids(last_seen: Mapping[str, float], now: float, ttl: float) -> list[str]:
    """Ids of the built-in registry's nodes heard from within `ttl` seconds, sorted."""
    return sorted(node_id for node_id, seen in last_seen.items() if is_live(seen, now, ttl))


def choose(candidates: Sequence[str], ticket: int) -> str:
    """The node for round-robin ticket `ticket` (1, 2, 3, ... from INCR). The scripts place
    jobs by the same rule in Lua (store/scripts/library.py, next_live); this is its model,
    which the placement tests hold both to."""
    if not candidates:
        raise NoHealthyNodes()
    return candidates[(ticket - 1) % len(candidates)]

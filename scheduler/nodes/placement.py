"""Which node gets a job (docs/GUIDE.md, Placement): the model of the scripts' Lua (store/scripts/
place.py, room.py), which the tests hold both to.

Pure functions. With the built-in registry a job goes to a live, undrained compute node that
matches its node_selector and has room for what it asks (`fits`), the least loaded of them
(fewest jobs held), ties broken round-robin (`spread`); with none, it waits unplaced and
`find_node` says why (models.job.PENDING_REASONS). An external registry's nodes carry no
labels nor room: there a job goes round-robin over the healthy ones (`choose`). The ticket
comes from one Redis INCR shared by every replica, and the candidates are sorted by id, so
all replicas agree on the rotation (the original iterated a Go map, which made its "round
robin" random).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.models.labels import Selector, matches, serves
from scheduler.models.registry import NodeStatus


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a new job may go: `mode` as in the create script's `pick_node`
    (store/scripts/library.py), with its candidates."""

    mode: str
    candidates: tuple[str, ...] = ()
    # A sharded deployment's other shards may take the job (store/jobs.py): with no node
    # for it here, the create answers NO_NODES instead of making it wait unplaced.
    elsewhere: bool = False

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
    jobs by the same rule in Lua (room.lua, next_live); this is its model,
    which the placement tests hold both to."""
    if not candidates:
        raise NoHealthyNodes()
    return candidates[(ticket - 1) % len(candidates)]


@dataclass(frozen=True, slots=True)
class Ask:
    """What a job asks of its node: models.job.Job's cpus, memory_mb and node_selector, and
    its namespace (as stored: "" for `default`), which a node labelled for some must serve."""

    cpus: int = 0
    memory_mb: int = 0
    node_selector: Selector = field(default_factory=dict)
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A compute node as placement sees it: its labels (models.labels.node_labels), what it
    offers (0: not checked), what its jobs hold, and whether it is live and drained."""

    id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    cpus: int = 0
    memory_mb: int = 0
    held_cpus: int = 0
    held_memory_mb: int = 0
    held_jobs: int = 0
    live: bool = True
    drained: bool = False


def within(ask: int, held: int, offered: int) -> bool:
    """`ask` fits in `offered` once `held` is counted; 0 offered is not checked (a node that
    sends no memory, the Rust agent, keeps the original's behaviour), nor is 0 asked."""
    return ask == 0 or offered == 0 or held + ask <= offered


def offers(node: NodeRoom, ask: Ask) -> bool:
    """The node matches the job's labels and offers enough, whatever it holds now."""
    return (
        matches(ask.node_selector, node.labels)
        and within(ask.cpus, 0, node.cpus)
        and within(ask.memory_mb, 0, node.memory_mb)
    )


def fits(node: NodeRoom, ask: Ask) -> bool:
    """The node has room for the job now: what it asks and what its jobs hold."""
    return within(ask.cpus, node.held_cpus, node.cpus) and within(
        ask.memory_mb, node.held_memory_mb, node.memory_mb
    )


def spread(loads: Mapping[str, int], ticket: int) -> str:
    """The least loaded node of `loads` (node id -> jobs held), ties broken round-robin by
    `ticket` over the tied ones sorted by id: a slow node, holding its backlog, gets no more
    until the others hold as much."""
    if not loads:
        raise NoHealthyNodes()
    low = min(loads.values())
    return choose(sorted(node for node, load in loads.items() if load == low), ticket)


def rotate(group: Sequence[str], ticket: int, fitting: Collection[str]) -> str | None:
    """Round-robin among ties: of `group` (nodes holding as many jobs, sorted by id), the
    first in `fitting` from the ticket's place on (with every node fitting: `choose`)."""
    start = (ticket - 1) % len(group)
    return next((n for n in [*group[start:], *group[:start]] if n in fitting), None)


def find_node(ask: Ask, nodes: Sequence[NodeRoom], ticket: int) -> tuple[str | None, str]:
    """(the node the job goes to, "") or (None, why: a key of PENDING_REASONS). Of the live,
    undrained nodes its selector matches, those that serve its namespace and have room for
    it now; the least loaded of them, ties rotated from the ticket over every such node
    holding as many (`rotate`: a node of another namespace is passed over there as one
    without room is, as the scripts walk their load index)."""
    live = [node for node in nodes if node.live]
    open_ = [n for n in live if not n.drained and matches(ask.node_selector, n.labels)]
    fitting = {n.id for n in open_ if fits(n, ask) and serves(n.labels, ask.namespace)}
    if fitting:
        low = min(node.held_jobs for node in open_ if node.id in fitting)
        group = sorted(node.id for node in open_ if node.held_jobs == low)
        return rotate(group, ticket, fitting), ""
    if not live:
        return None, "no_nodes"
    serving = [node for node in live if serves(node.labels, ask.namespace)]
    if not serving:
        return None, "namespace"
    matching = [node for node in serving if offers(node, ask)]
    if not matching:
        return None, "no_fit"
    return None, "full" if any(not node.drained for node in matching) else "drained"

"""A node's operations: registered, heard from, drained and undrained, deregistered; and the
deployment's nodes read (GET /nodes, the placement across shards)."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from scheduler.models.registry import Node, NodeRegistration
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import live_node_ids
from scheduler.store.operation import (
    Command,
    OfNode,
    Route,
    Shard,
    Steps,
    by_node,
    each,
    home,
    nested,
    operation,
    run,
    send,
    together,
)
from scheduler.store.pieces import MOVE_STEP, drained
from scheduler.store.scripts import drains as drain_scripts
from scheduler.store.scripts import nodes as node_scripts
from scheduler.store.scripts.replies import Requeued

# Jobs an id passing to a new holder hands back (more: the registration is refused).
DELETE_MOVES = 1000
_node_decoder = msgspec.json.Decoder(Node)


@operation(by_node)
def registered(shard: Shard, node_id: str) -> Steps[bool]:
    """Whether a registry lists the node (the built-in one, or the external one's sweep)."""
    return (yield from run(node_scripts.registered(node_id, shard.settings.builtin_registry)))


@operation(home)
def live_compute(shard: Shard, now: float) -> Steps[int]:
    """How many compute nodes of this shard are live (heard from within NODE_TTL_SECS)."""
    cutoff = now - shard.settings.node_ttl_secs
    live: int = yield from send("ZCOUNT", shard.keys.nodes_compute, cutoff, "+inf")
    return live


def _answered(parts: list[dict[int, int] | BaseException]) -> dict[int, int]:
    return {k: n for part in parts if isinstance(part, dict) for k, n in part.items()}


@operation(each(_answered, tolerant=True))
def held_nodes(shard: Shard) -> Steps[dict[int, int]]:
    """How many nodes each shard that answers holds, by shard."""
    held: int = yield from send("HLEN", shard.keys.nodes)
    return {shard.index: held}


def _of_registration(reg: NodeRegistration, *_: Any) -> Route:
    return OfNode(reg.id)


@operation(_of_registration)
def register_node(
    shard: Shard,
    reg: NodeRegistration,
    now: float,
    who: node_scripts.Registration,
    token_hash: str,
) -> Steps[tuple[Node, node_scripts.Registered]]:
    """The node as registered, what became of the token and the jobs handed back
    (scripts.nodes.register_node). MAX_NODES bounds the deployment's nodes, not each
    shard's: the node's shard may hold what the others leave (their counts read now, sent
    together: a registration is rare); a shard that does not answer counts none, so a
    failover stops no other's."""
    if shard.count > 1:
        held = yield from nested(held_nodes())
        others = sum(n for k, n in held.items() if k != shard.index)
        who = dataclasses.replace(who, max_nodes=who.max_nodes - others)
    node = Node(
        id=reg.id,
        hostname=reg.hostname,
        addr=reg.addr,
        cpu_count=reg.cpu_count,
        role=reg.role or "compute",
        memory_mb=reg.memory_mb,
        labels=reg.labels,
    )
    node_json = msgspec.json.encode(node)
    call = node_scripts.register_node(
        node.id, node_json, node.role, now, who, token_hash, DELETE_MOVES
    )
    registration = yield from run(call)
    return msgspec.structs.replace(node, status="healthy", last_seen=rfc3339(now)), registration


@operation(by_node)
def heartbeat(shard: Shard, node_id: str, now: float, caller: str) -> Steps[tuple[Node, list[str]]]:
    """The node, and the ids of its jobs being cancelled."""
    s = shard.settings
    vouched = node_scripts.vouches(caller, s.api_key)
    call = node_scripts.heartbeat(node_id, now, caller, s.node_ttl_secs, vouched)
    blob, cancels = yield from run(call)
    node = _node_decoder.decode(blob)
    return msgspec.structs.replace(node, status="healthy", last_seen=rfc3339(now)), cancels


@operation(by_node)
def check_node_caller(shard: Shard, node_id: str, caller: str) -> Steps[None]:
    """Raises unless `caller` is the key or the node's own token (node_scripts)."""
    yield from run(node_scripts.node_caller(node_id, caller))


@operation(by_node)
def delete_node(shard: Shard, node_id: str, now: float, caller: str) -> Steps[list[Requeued]]:
    """Deregister a node; its pending jobs move to live nodes (the first MOVE_STEP here,
    any others at the next sweep: pieces.py)."""
    ttl = shard.settings.node_ttl_secs
    return (yield from run(node_scripts.delete_node(node_id, now, ttl, MOVE_STEP, caller)))


@operation(by_node)
def drain_node(
    shard: Shard,
    node_id: str,
    now: float,
    by: str = "operator",
    *,
    caller: str = "key",
    listed: bool = False,
) -> Steps[drain_scripts.Drained]:
    """Drain a node (scripts.drains.DRAIN_NODE): nothing new goes to it or starts there,
    its jobs not running move to other nodes (the first DRAIN_MOVES, in calls of
    MOVE_STEP: pieces.py; a drain again moves more). `listed`: the external registry
    lists it (REGISTRY_URL)."""
    ttl = shard.settings.node_ttl_secs
    return (yield from drained(node_id, by, caller, listed, now, ttl))


@operation(by_node)
def undrain_node(
    shard: Shard, node_id: str, *, caller: str = "key", listed: bool = False
) -> Steps[bool]:
    """Lift a node's drain; whether it was drained."""
    return (yield from run(drain_scripts.undrain_node(node_id, caller, listed)))


def _joined(found: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: v for part in found for k, v in part.items()}


@operation(each(_joined))
def drains(shard: Shard) -> Steps[dict[str, str]]:
    """The drained nodes: id -> who drained it ("operator" or "stopping")."""
    flat = yield from send("HGETALL", shard.keys.drained_nodes)
    return {str(flat[i], "utf-8"): str(flat[i + 1], "utf-8") for i in range(0, len(flat), 2)}


@operation(each(_joined))
def nodes(shard: Shard, now: float) -> Steps[dict[str, Node]]:
    """Every registered node, healthy while heard from within NODE_TTL_SECS."""
    keys = shard.keys
    found, seen = yield from together(
        Command(("HGETALL", keys.nodes)),
        Command(("ZRANGE", keys.nodes_seen, 0, -1, "WITHSCORES")),
    )
    last_seen = {str(seen[i], "utf-8"): float(seen[i + 1]) for i in range(0, len(seen), 2)}
    live = set(live_node_ids(last_seen, now, shard.settings.node_ttl_secs))
    listed = {}
    for raw_id, blob in zip(found[::2], found[1::2], strict=True):
        node_id = str(raw_id, "utf-8")
        status = "healthy" if node_id in live else "unhealthy"
        seen_at = rfc3339(last_seen.get(node_id, 0.0))
        node = _node_decoder.decode(blob)
        listed[node_id] = msgspec.structs.replace(node, status=status, last_seen=seen_at)
    return listed

"""Script calls of the built-in registry: nodes (register, heartbeat, delete), their
services, and the overview the UI and /metrics read. Built like commands.py's: plain values,
no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.store import lua
from scheduler.store.commands import (
    Call,
    Forbidden,
    NodeNotFound,
    TooManyNodes,
    Unauthorized,
    check_access,
    ids,
)
from scheduler.store.keys import Keys
from scheduler.store.upkeep_commands import Requeued, requeued


def _node_keys(keys: Keys) -> list[str]:
    return [
        keys.root,
        keys.nodes,
        keys.nodes_seen,
        keys.nodes_compute,
        keys.node_tokens,
        keys.tokens,
    ]


@dataclass(frozen=True, slots=True)
class Registration:
    """Who registers a node and under which rules (REGISTER_NODE's header)."""

    caller: str
    agent_auth: str
    key_required: bool
    max_nodes: int
    node_ttl: float


def _registered(reply: list[Any]) -> str:
    code = reply[0]
    if code == lua.UNAUTHORIZED:
        raise Unauthorized()
    if code == lua.TOO_MANY_NODES:
        raise TooManyNodes()
    if code == lua.ROLE_LOCKED:
        raise Forbidden("forbidden: changing a node's role needs its token or the API key")
    return str(reply[1], "utf-8")


def register_node(
    keys: Keys,
    node_id: str,
    node_json: bytes,
    role: str,
    now: float,
    who: Registration,
    token_hash: str,
) -> Call[str]:
    """Returns "issued" (the token of `token_hash` is now the node's), "kept" (the caller's
    own token stays the node's) or "none" (an anonymous re-register: no token for it)."""
    args = [node_id, node_json, role, now, who.caller, who.agent_auth]
    args += ["1" if who.key_required else "0", token_hash, who.max_nodes, who.node_ttl]
    return Call("REGISTER_NODE", _node_keys(keys), args, _registered)


def _heartbeat(reply: list[Any]) -> tuple[bytes, list[str]]:
    if reply[0] == lua.NOT_FOUND:
        raise NodeNotFound()
    check_access(reply[0])
    blob: bytes = reply[1]
    return blob, ids(reply[2])


def heartbeat(keys: Keys, node_id: str, now: float, caller: str) -> Call[tuple[bytes, list[str]]]:
    """The node's record, and the ids of its jobs being cancelled."""
    beat_keys = [*_node_keys(keys), keys.node_status(node_id, "cancelling")]
    return Call("HEARTBEAT", beat_keys, [node_id, now, caller], _heartbeat)


def _deleted(reply: list[Any]) -> list[Requeued]:
    if reply[0] == lua.NOT_FOUND:
        raise NodeNotFound()
    check_access(reply[0])
    return requeued(reply[1:])


def delete_node(
    keys: Keys, node_id: str, now: float, node_ttl: float, limit: int, caller: str
) -> Call[list[Requeued]]:
    """Deregister a node; its pending jobs (up to `limit`) move to live nodes now."""
    return Call(
        "DELETE_NODE",
        [*_node_keys(keys), keys.rr_seq, keys.dirty, keys.all_jobs],
        [node_id, now - node_ttl, limit, caller],
        _deleted,
    )


@dataclass(frozen=True, slots=True)
class Overview:
    """The web UI's nodes page (scripts.OVERVIEW)."""

    nodes: dict[str, bytes]  # node id -> node JSON (built-in registry)
    last_seen: dict[str, float]
    queues: dict[str, tuple[int, int]]  # node id -> (pending, running)
    by_status: dict[str, int]
    stats: dict[str, int]
    outbox: int


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {str(flat[i], "utf-8"): flat[i + 1] for i in range(0, len(flat), 2)}


def _overview(reply: list[Any]) -> Overview:
    nodes, seen, counts, by_status, stats, outbox = reply
    queues = {
        str(counts[i], "utf-8"): (counts[i + 1], counts[i + 2]) for i in range(0, len(counts), 3)
    }
    return Overview(
        nodes=_pairs(nodes),
        last_seen={k: float(v) for k, v in _pairs(seen).items()},
        queues=queues,
        by_status=_pairs(by_status),
        stats={k: int(v) for k, v in _pairs(stats).items()},
        outbox=outbox,
    )


def overview(keys: Keys, statuses: Sequence[str]) -> Call[Overview]:
    node_keys = [keys.root, keys.nodes, keys.nodes_seen, keys.nodes_compute]
    return Call("OVERVIEW", [*node_keys, keys.stats, keys.outbox], list(statuses), _overview)


class ServiceNotFound(LookupError):
    def __str__(self) -> str:
        return "not found"  # the original registry's text


def _service_keys(keys: Keys, node_id: str = "") -> list[str]:
    node = keys.node_services(node_id) if node_id else ""
    return [keys.root, keys.services, keys.service_seq, keys.tokens, node]


def _service_created(reply: list[Any]) -> bytes:
    check_access(reply[0])
    if reply[0] == lua.TOO_MANY_NODES:
        raise TooManyServices()
    blob: bytes = reply[1]
    return blob


class TooManyServices(Exception):
    def __str__(self) -> str:
        return "too many services registered"


def create_service(
    keys: Keys, node_id: str, service_json: bytes, caller: str, most: int, most_per_node: int
) -> Call[bytes]:
    """`service_json` starts with `{"id":""` (models.Service, id first); the script fills it."""
    args = [node_id, service_json, caller, most, most_per_node]
    return Call("CREATE_SERVICE", _service_keys(keys, node_id), args, _service_created)


def _service_set(code: int) -> None:
    if code == lua.NOT_FOUND:
        raise ServiceNotFound()
    check_access(code)


def set_service_status(keys: Keys, service_id: str, status: str, caller: str) -> Call[None]:
    args = [service_id, status, caller]
    return Call("SET_SERVICE_STATUS", _service_keys(keys), args, _service_set)


def _services(reply: list[Any]) -> list[bytes]:
    check_access(reply[0])
    return list(reply[1:])


def list_services(keys: Keys, node_id: str, status: str, caller: str) -> Call[list[bytes]]:
    args = [node_id, status, caller]
    return Call("LIST_SERVICES", _service_keys(keys, node_id), args, _services)

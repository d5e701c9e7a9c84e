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
    _listed,
    read_only=True,
)


def registered(node_id: str, builtin: bool) -> Call[bool]:
    """Whether node `node_id` is registered (REGISTERED): only such a node's long-poll is
    held (store/jobs.py poll_wait)."""
    return REGISTERED.call(node=node_id, builtin="1" if builtin else "0")

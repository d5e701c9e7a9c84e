"""The registry on the wire: nodes (CONTRACT 4.1), instances and services (4.2), as the
built-in registry serves them and the external one reports them, and their validation."""

from __future__ import annotations

import re

import msgspec
from msgspec import UNSET, UnsetType

from scheduler.models.labels import check_labels
from scheduler.models.wire import Int64, InvalidInput, check_id


class NodeRegistration(msgspec.Struct):
    id: str = ""
    hostname: str = ""
    cpu_count: Int64 = 0
    role: str = ""
    addr: str = ""
    # Ours (docs/GUIDE.md, Placement): what the node offers beyond its cpus, and its labels. The
    # Rust agent sends neither: 0 memory is "unknown", not checked.
    memory_mb: Int64 = 0
    labels: dict[str, str] = {}


class Heartbeat(msgspec.Struct):
    id: str = ""


class Node(msgspec.Struct):
    """A node as the registry reports it (GET /nodes values); every field is emitted, but the
    drain's, which only a drained node has (`with_drain`: clients that do not know drains
    see the node as before, and nothing is ever null)."""

    id: str
    hostname: str = ""
    addr: str = ""
    cpu_count: int = 0
    role: str = ""
    status: str = ""
    last_seen: str = ""
    memory_mb: int = 0
    labels: dict[str, str] = {}
    drained: bool | UnsetType = UNSET
    drained_by: str | UnsetType = UNSET


# Who drains a node (POST /nodes/{id}/drain, docs/GUIDE.md, "Drain"): the operator (the key), for
# maintenance; or its own agent stopping cleanly, whose next registration lifts it.
DRAINERS = ("operator", "stopping")


def with_drain(node: Node, by: str | None) -> Node:
    """The node as GET /nodes shows it, drained by `by` (None: not drained). Whatever an
    external registry says of drains is replaced: the drains are the scheduler's."""
    if by is None:
        return msgspec.structs.replace(node, drained=UNSET, drained_by=UNSET)
    return msgspec.structs.replace(node, drained=True, drained_by=by)


class DrainRequest(msgspec.Struct):
    """POST /nodes/{id}/drain's body, optional: who drains it (DRAINERS)."""

    by: str = "operator"


def validate_drain(req: DrainRequest) -> None:
    if req.by not in DRAINERS:
        raise InvalidInput(f"invalid by {req.by!r}: use operator or stopping")


class NodeDrained(Node):
    """POST /nodes/{id}/drain's answer: the node as GET /nodes shows it, and what became of
    its jobs not running: `moved` to other nodes, `unplaced` (left it for no node yet: each
    waits, its pending_reason saying why, until placement finds it one), `stayed` bound to it
    (an instance's, or past the call's limit: a drain again moves them)."""

    moved: int = 0
    unplaced: int = 0
    stayed: int = 0


class NodeRegistered(Node):
    """POST /nodes/register's answer: the node, and its `token` when the caller holds it (a
    new node, or the key's re-register: a fresh one; the node's own re-register: the same);
    the original Rust agent ignores it."""

    token: str | UnsetType = UNSET


class NodeBeat(Node):
    """POST /nodes/heartbeat's answer: the node, and `cancel`, the ids of its jobs being
    cancelled, when there are any (the original agent ignores it; ours stops them)."""

    cancel: list[str] | UnsetType = UNSET


class NodeUndrained(Node):
    """POST /nodes/{id}/undrain's answer: the node as GET /nodes shows it, and whether it
    was drained."""

    undrained: bool = False


class NodeStatus(msgspec.Struct):
    """The part of a registry node the scheduler reads (CONTRACT 2.6)."""

    id: str = ""
    role: str = ""
    status: str = ""


class Instance(msgspec.Struct):
    id: str = ""
    node_id: str = ""
    status: str = ""


class ServiceCreate(msgspec.Struct):
    """POST /services, as the Rust agent registers a service it started (CONTRACT 3.4)."""

    node_id: str = ""
    instance_id: str = ""
    port: Int64 = 0
    pid: Int64 = 0
    deploy_url: str = ""


class Service(msgspec.Struct):
    """A service as the registry reports it (CONTRACT 4.2); every field is emitted, `id` first
    (the create script fills it in)."""

    id: str
    instance_id: str
    node_id: str
    port: int
    pid: int
    status: str
    deploy_url: str
    created_at: str


class ServiceUpdate(msgspec.Struct):
    status: str = ""


# A service status is a word (running, stopped, crashed, done, ...): the original registry
# took any non-empty string; ours keeps it short and plain.
SERVICE_STATUS_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")


def validate_service(req: ServiceCreate) -> None:
    if not req.node_id:
        raise InvalidInput("node_id required")
    check_id("node_id", req.node_id)
    if req.instance_id:
        check_id("instance_id", req.instance_id)
    if not 0 <= req.port <= 65535:
        raise InvalidInput(f"invalid port {req.port}: use 0 to 65535")
    if not 0 <= req.pid <= 2**31 - 1:
        raise InvalidInput(f"invalid pid {req.pid}")
    if len(req.deploy_url) > 2048 or not req.deploy_url.isprintable():
        raise InvalidInput("invalid deploy_url: at most 2048 printable characters")


NODE_ROLES = ("", "compute", "storage")
# Every field of a registration is bounded: nodes live in Redis and in every GET /nodes.
NODE_TEXT_MAX, NODE_CPUS_MAX = 255, 65_536
MEMORY_MB_MAX = 2**24  # 16 TiB


def validate_registration(reg: NodeRegistration) -> None:
    check_id("id", reg.id)
    if reg.role not in NODE_ROLES:
        raise InvalidInput(f"invalid role {reg.role!r}: use compute or storage")
    for field, value in (("hostname", reg.hostname), ("addr", reg.addr)):
        if len(value) > NODE_TEXT_MAX or not value.isprintable():
            raise InvalidInput(f"invalid {field}: at most {NODE_TEXT_MAX} printable characters")
    if not 0 <= reg.cpu_count <= NODE_CPUS_MAX:
        raise InvalidInput(f"invalid cpu_count {reg.cpu_count}: use 0 to {NODE_CPUS_MAX}")
    if not 0 <= reg.memory_mb <= MEMORY_MB_MAX:
        raise InvalidInput(f"invalid memory_mb {reg.memory_mb}: use 0 to {MEMORY_MB_MAX}")
    check_labels(reg.labels)

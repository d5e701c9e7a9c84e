"""The built-in registry's routes, served when REGISTRY_URL is unset: what the Rust agent calls
(register, heartbeat, instances) and what an operator or load balancer reads (GET /nodes)."""

from __future__ import annotations

import logging
import time
from typing import TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from scheduler.api.http import HTTPError, json_bytes, read_body, route
from scheduler.models import (
    ID_RE,
    DecodeError,
    Heartbeat,
    NodeRegistration,
    check_id,
    decode_go_style,
)
from scheduler.store.commands import NodeNotFound
from scheduler.store.jobs import JobStore

S = TypeVar("S", bound=msgspec.Struct)

log = logging.getLogger("scheduler.api")


def _store(request: Request) -> JobStore:
    store: JobStore = request.app.state.store
    return store


async def _decode(request: Request, kind: type[S], message: str) -> S:
    body = await read_body(request, request.app.state.settings.max_body_bytes)
    try:
        return decode_go_style(body, kind)
    except DecodeError:
        raise HTTPError(400, message) from None


async def register(request: Request) -> Response:
    reg = await _decode(request, NodeRegistration, "failed to decode node")
    check_id("id", reg.id)
    if reg.role not in ("", "compute", "storage"):
        raise HTTPError(400, f"invalid role {reg.role!r}: use compute or storage")
    node = await _store(request).register_node(reg, time.time())
    return json_bytes(msgspec.json.encode(node), status=201)


async def heartbeat(request: Request) -> Response:
    beat = await _decode(request, Heartbeat, "failed to decode heartbeat")
    if not ID_RE.fullmatch(beat.id):
        raise NodeNotFound()
    node = await _store(request).heartbeat(beat.id, time.time())
    return json_bytes(msgspec.json.encode(node))


async def list_nodes(request: Request) -> Response:
    role = request.query_params.get("role", "")
    nodes = await _store(request).nodes(time.time())
    chosen = {node_id: node for node_id, node in nodes.items() if not role or node.role == role}
    return json_bytes(msgspec.json.encode(chosen))


async def delete_node(request: Request) -> Response:
    node_id: str = request.path_params["node_id"]
    if not ID_RE.fullmatch(node_id):
        raise NodeNotFound()
    moved = await _store(request).delete_node(node_id, time.time())
    if moved:
        log.info("node %s left: %d pending job(s) moved to live nodes", node_id, len(moved))
    return Response(status_code=204)


async def list_instances(request: Request) -> Response:
    # The built-in registry runs no instances. The agent reads this list every tick and
    # only polls for jobs when it is empty or has a running instance.
    return json_bytes(b"[]")


def routes() -> list[Route]:
    return [
        route("/nodes/register", POST=register),
        route("/nodes/heartbeat", POST=heartbeat),
        route("/nodes", GET=list_nodes),
        route("/nodes/{node_id}", DELETE=delete_node),
        route("/instances", GET=list_instances),
    ]

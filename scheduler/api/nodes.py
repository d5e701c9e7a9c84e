"""The built-in registry's routes, served when REGISTRY_URL is unset: what the Rust agent calls
(register, heartbeat, instances); and, with either registry, what an operator or load
balancer reads (GET /nodes) and the drains (POST /nodes/{id}/drain and /undrain: README,
Drain)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.agents import bearer, new_token, token_hash
from scheduler.api.errors import reply_for
from scheduler.api.guesses import UNAUTHORIZED
from scheduler.api.http import HTTPError, json_bytes, one_of, read_body, undecodable
from scheduler.api.params import param
from scheduler.api.state import agent_auth as _auth
from scheduler.api.state import credentials as _credentials
from scheduler.api.state import node_source as _node_source
from scheduler.api.state import store as _store
from scheduler.config import Settings
from scheduler.models.registry import (
    NODE_ROLES,
    DrainRequest,
    Heartbeat,
    Node,
    NodeBeat,
    NodeDrained,
    NodeRegistered,
    NodeRegistration,
    NodeUndrained,
    validate_drain,
    validate_registration,
    with_drain,
)
from scheduler.models.wire import ID_RE, DecodeError, decode_go_style
from scheduler.store import ops
from scheduler.store.errors import Forbidden, NodeNotFound, TooManyNodes, Unauthorized
from scheduler.store.scripts.nodes import Registration, vouches
from scheduler.store.scripts.retry import RetryPolicy

# A registration or a heartbeat is a few hundred bytes; MAX_BODY_BYTES is for job requests.
NODE_BODY_LIMIT = 16 * 1024

S = TypeVar("S", bound=msgspec.Struct)

log = logging.getLogger("scheduler.api")


async def _decode(request: Request, kind: type[S], what: str) -> S:
    limit = min(NODE_BODY_LIMIT, request.app.state.settings.max_body_bytes)
    body = await read_body(request, limit)
    try:
        return decode_go_style(body, kind)
    except DecodeError as exc:
        raise undecodable(what, exc) from None


def _registration(request: Request) -> Registration:
    auth, settings = _auth(request), request.app.state.settings
    assert isinstance(settings, Settings)
    caller = auth.identify(request)
    return Registration(
        caller=caller,
        agent_auth=auth.mode,
        key_required=auth.key_required,
        max_nodes=settings.max_nodes,
        node_ttl=settings.node_ttl_secs,
        retries=RetryPolicy.of(settings),
        vouches=vouches(caller, settings.api_key),
    )


async def register(request: Request) -> Response:
    """The answer is the node, plus `token` when the caller holds the node's token (a new
    node, or the key's re-register: a fresh one; the node's own re-register: the same)."""
    reg = await _decode(request, NodeRegistration, "node")
    validate_registration(reg)
    token, store, who = new_token(), _store(request), _registration(request)
    try:
        node, done = await store.run(
            ops.nodes.register_node(reg, time.time(), who, token_hash(token))
        )
    except Unauthorized:
        if who.caller == "join":
            # The join key is right where it registers (this id is held): refused, not
            # counted as a guess (guesses.py).
            raise HTTPError(*UNAUTHORIZED) from None
        raise
    except (Forbidden, TooManyNodes) as exc:
        # Open mode: only the key changes a known node's role, or adds a node past
        # MAX_NODES. A bearer refused so was told from the key: a wrong credential, counted.
        if who.caller == "join":
            raise
        refusal = reply_for(exc, "POST /nodes/register")
        assert refusal is not None
        raise HTTPError(*await _credentials(request).refused_asgi(request.scope, refusal)) from None
    if done.outcome == "none" and who.caller != "join":
        # Open mode, a known id: its bearer (if it sent one) was neither the key nor the
        # node's token. The registration stands, as anyone's may; the bearer is counted as
        # the wrong credential it is (the answer shows no token: a test of the key), unless
        # it is a named key: right, only not a node's (guesses.py counts no right key).
        await _credentials(request).refused_asgi(request.scope)
    if done.moved or done.lost:
        log.info(
            "node %s has a new holder: %d queued and %d running job(s) of the old one put back",
            node.id,
            len(done.moved),
            len(done.lost),
        )
    answer = NodeRegistered(**msgspec.to_builtins(node))
    if done.outcome != "none":
        answer.token = token if done.outcome == "issued" else bearer(request)
    return json_bytes(msgspec.json.encode(answer), status=201)


async def heartbeat(request: Request) -> Response:
    caller = _auth(request).caller(request)  # first: token mode refuses strangers unread
    beat = await _decode(request, Heartbeat, "heartbeat")
    if not ID_RE.fullmatch(beat.id):
        raise NodeNotFound()
    node, cancels = await _store(request).run(ops.nodes.heartbeat(beat.id, time.time(), caller))
    answer = NodeBeat(**msgspec.to_builtins(node))
    if cancels:  # its jobs being cancelled: an extra field, which the original agent ignores
        answer.cancel = cancels
    return json_bytes(msgspec.json.encode(answer))


async def _listing(request: Request, role: str) -> dict[str, Node]:
    """GET /nodes's nodes: the node source's, each with its drain (the drains are ours with
    either registry). Sent together: with the built-in registry, one round trip."""
    nodes, drains = await asyncio.gather(
        _node_source(request).nodes(role), _store(request).run(ops.nodes.drains())
    )
    return {node_id: with_drain(node, drains.get(node_id)) for node_id, node in nodes.items()}


async def list_nodes(request: Request) -> Response:
    """The built-in registry's nodes, or with REGISTRY_URL the registry's, in one shape."""
    role = one_of("role", param(request, "role"), NODE_ROLES)
    return json_bytes(msgspec.json.encode(await _listing(request, role)))


async def delete_node(request: Request) -> Response:
    """The operator removes a node, or (AGENT_AUTH=token) a node's agent, stopping cleanly,
    removes its own; its token stops working at once."""
    node_id: str = request.path_params["node_id"]
    if not ID_RE.fullmatch(node_id):
        raise NodeNotFound()
    caller = _auth(request).operator_or_node(request)
    moved = await _store(request).run(ops.nodes.delete_node(node_id, time.time(), caller))
    if moved:
        log.info("node %s left: %d pending job(s) moved to live nodes", node_id, len(moved))
    return Response(status_code=204)


async def list_instances(request: Request) -> Response:
    """The built-in registry runs no instances: always []. An agent call (the agents read it
    before each poll), so that no agent's own traffic is ever a wrong credential: anyone's
    in open mode; in token mode the node's own token (node_id) or the key, a wrong one
    counted as on every agent route."""
    caller = _auth(request).caller(request)  # token mode: no bearer, refused unread
    if caller not in ("open", "key"):
        node_id = param(request, "node_id")
        if not ID_RE.fullmatch(node_id):
            raise Unauthorized()  # no node's: the operator's listing, the key's
        await _store(request).run(ops.nodes.check_node_caller(node_id, caller))
    return json_bytes(b"[]")


async def _drain_target(request: Request) -> tuple[str, str, bool]:
    """The node of a drain or undrain, its caller (the operator's "key", or in token mode a
    node token, which the scripts let act on its own node only) and whether REGISTRY_URL's
    registry lists it. A caller is refused before anything else is read."""
    node_id: str = request.path_params["node_id"]
    caller = _auth(request).operator_or_node(request)
    if not ID_RE.fullmatch(node_id):
        raise NodeNotFound()
    return node_id, caller, await listed(request, node_id)


async def listed(request: Request, node_id: str) -> bool:
    """Whether REGISTRY_URL's registry lists the node. Its node ids are the ones its jobs
    are bound to (and the sweep's sightings), so a node it lists may be drained; without
    one, the drain scripts check the built-in registry's nodes themselves."""
    settings = request.app.state.settings
    assert isinstance(settings, Settings)
    return not settings.builtin_registry and node_id in await _node_source(request).nodes("")


async def _shown(request: Request, node_id: str) -> Node:
    """The node as GET /nodes shows it (an id no registry lists: its id only)."""
    return (await _listing(request, "")).get(node_id) or Node(id=node_id)


async def drain(request: Request) -> Response:
    """No new job goes to the node; its jobs not running move to nodes that may take them;
    its running ones finish. The key's drain (`by` operator, the default), or its own
    agent's as it stops cleanly (`by` stopping: the only one a node's token may ask)."""
    node_id, caller, listed = await _drain_target(request)
    body = await read_body(request, NODE_BODY_LIMIT)
    try:
        ask = decode_go_style(body, DrainRequest) if body.strip() else DrainRequest()
    except DecodeError as exc:
        raise undecodable("drain", exc) from None
    validate_drain(ask)
    if caller != "key" and ask.by != "stopping":
        # The token first: a bearer that is no live node token is a wrong credential
        # (counted), not an answer telling it from the key.
        await _store(request).run(ops.nodes.check_node_caller(node_id, caller))
        raise Forbidden("forbidden: a node's token drains its own node as stopping only")
    done = await _store(request).run(
        ops.nodes.drain_node(node_id, time.time(), ask.by, caller=caller, listed=listed)
    )
    moved, unplaced = len(done.moved) - done.unplaced, done.unplaced
    if done.moved:
        log.info("node %s drained: %d job(s) moved, %d unplaced", node_id, moved, unplaced)
    node = msgspec.to_builtins(await _shown(request, node_id))
    answer = NodeDrained(**node | {"moved": moved, "unplaced": unplaced, "stayed": done.stayed})
    return json_bytes(msgspec.json.encode(answer))


async def undrain(request: Request) -> Response:
    """The node is a placement candidate again. The key lifts any drain; a node's token
    only the one of its own clean stop."""
    node_id, caller, listed = await _drain_target(request)
    was = await _store(request).run(ops.nodes.undrain_node(node_id, caller=caller, listed=listed))
    node = msgspec.to_builtins(await _shown(request, node_id))
    return json_bytes(msgspec.json.encode(NodeUndrained(**node | {"undrained": was})))

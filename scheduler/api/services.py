"""The built-in registry's service routes (REGISTRY_URL unset), as the original registry had
them (CONTRACT 4.1): the Rust agent registers each service it starts, marks it done or crashed
when it exits, and every 10 s asks which of its services an operator stopped."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.http import HTTPError, json_array, json_bytes, read_body, undecodable
from scheduler.api.params import param
from scheduler.api.state import agent_auth
from scheduler.api.state import store as _store
from scheduler.models.registry import (
    SERVICE_STATUS_RE,
    Service,
    ServiceCreate,
    ServiceUpdate,
    validate_service,
)
from scheduler.models.wire import ID_RE, DecodeError, check_id, decode_go_style, rfc3339
from scheduler.store import ops
from scheduler.store.errors import ServiceNotFound

BODY_LIMIT = 16 * 1024  # a service is a few hundred bytes


def _caller(request: Request) -> str:
    return agent_auth(request).caller(request)


def _service_id(request: Request) -> str:
    service_id: str = request.path_params["service_id"]
    if not ID_RE.fullmatch(service_id):
        raise ServiceNotFound()
    return service_id


async def create(request: Request) -> Response:
    caller = _caller(request)  # first: token mode refuses strangers unread
    body = await read_body(request, BODY_LIMIT)
    try:
        req = decode_go_style(body, ServiceCreate)
    except DecodeError as exc:
        raise undecodable("service", exc) from None
    validate_service(req)
    service = Service(
        id="",
        instance_id=req.instance_id,
        node_id=req.node_id,
        port=req.port,
        pid=req.pid,
        status="running",
        deploy_url=req.deploy_url,
        created_at=rfc3339(time.time()),
    )
    return json_bytes(await _store(request).run(ops.services.create_service(service, caller)), 201)


async def list_services(request: Request) -> Response:
    # The values the door read (params.py): `node_id=n1&node_id=` once passed the door as
    # n1's list and was answered here as the operator's list of every service.
    node_id, status = param(request, "node_id"), param(request, "status")
    # An agent's own list: its caller is checked first. Without a node it is the operator's
    # (the key, when one is set, was checked on the way in).
    caller = _caller(request) if node_id else "key"
    if node_id:
        check_id("node_id", node_id)
    if status and not SERVICE_STATUS_RE.fullmatch(status):
        return json_array([])  # no service has such a status
    return json_array(await _store(request).run(ops.services.services(node_id, status, caller)))


async def get_service(request: Request) -> Response:
    blob = await _store(request).run(ops.services.service(_service_id(request)))
    if blob is None:
        raise ServiceNotFound()
    return json_bytes(blob)


async def update(request: Request) -> Response:
    caller = _caller(request)  # first: token mode refuses strangers unread
    service_id = _service_id(request)
    try:
        req = decode_go_style(await read_body(request, BODY_LIMIT), ServiceUpdate)
    except DecodeError as exc:
        raise undecodable("service", exc) from None
    if not req.status:
        raise HTTPError(400, "status required")
    if not SERVICE_STATUS_RE.fullmatch(req.status):
        raise HTTPError(400, "invalid status: a word of A-Z a-z 0-9 _ -, up to 32")
    await _store(request).run(ops.services.set_service_status(service_id, req.status, caller))
    return Response(status_code=204)


async def stop(request: Request) -> Response:
    """The operator's stop (the key): the agent kills it at its next look (CONTRACT 3.5)."""
    await _store(request).run(
        ops.services.set_service_status(_service_id(request), "stopped", "key")
    )
    return Response(status_code=204)

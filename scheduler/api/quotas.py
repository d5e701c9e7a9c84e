"""The namespaces' quotas over HTTP (docs/GUIDE.md, Quotas): an admin sets one (PUT
/namespaces/{ns}/quota, audited), anyone with a key reads them with what each namespace holds
now (GET /namespaces: a key limited to namespaces sees only those). Enforcement is the
scripts' (store/scripts/lua/includes/quota.lua, admit.lua)."""

from __future__ import annotations

import time
from typing import TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.hot import once_restored
from scheduler.api.http import HTTPError, caller, json_bytes, read_body, undecodable
from scheduler.api.state import store as _store
from scheduler.models.access_key import Principal
from scheduler.models.namespace import check_namespace, stored
from scheduler.models.quota import Quota, QuotaChange
from scheduler.models.wire import DecodeError, decode_with
from scheduler.store.scripts import quotas
from scheduler.store.scripts.script import Call

BODY_LIMIT = 4096
_decoder = msgspec.json.Decoder(Quota)
_change_decoder = msgspec.json.Decoder(QuotaChange)
T = TypeVar("T", bound=msgspec.Struct)
_encoder = msgspec.json.Encoder()


async def set_quota(request: Request) -> Response:
    """PUT /namespaces/{namespace}/quota {"running", "pending", "cpus", "memory_mb"}: 200 and
    the quota as stored (every limit 0 or absent: none). 400 for a name or limit out of
    bounds, nothing changed."""
    name, by = _admin_of(request)
    quota = await _body(request, _decoder)
    call = quotas.set_quota(name, quota, time.time(), by)
    return await _stored(request, call)


async def change_quota(request: Request) -> Response:
    """PATCH /namespaces/{namespace}/quota: the limits given change (0: that one goes), the
    others stay, in one step (two admins changing two limits at once both keep theirs); 200
    and the quota as stored. 400 as PUT's, nothing changed."""
    name, by = _admin_of(request)
    change = await _body(request, _change_decoder)
    call = quotas.change_quota(name, change, time.time(), by)
    return await _stored(request, call)


def _admin_of(request: Request) -> tuple[str, Principal]:
    """The namespace named (as stored) and the caller, who may set its quota: 400 for a bad
    name, 403 for a key limited to namespaces (a team's own admin would lift its limits)."""
    name: str = request.path_params["namespace"]
    check_namespace(name)  # InvalidInput: 400
    by = caller(request)
    if by.namespaces:
        raise HTTPError(
            403,
            f"forbidden: the key {by.name!r} is limited to namespaces: a quota is set by a key "
            "of every namespace",
        )
    return stored(name), by


async def _body(request: Request, decoder: msgspec.json.Decoder[T]) -> T:
    try:
        return decode_with(decoder, await read_body(request, BODY_LIMIT))
    except DecodeError as exc:
        raise undecodable("quota", exc) from None


async def _stored(request: Request, call: Call[Quota]) -> Response:
    quota = await once_restored(request.app.state, lambda: _store(request).run(call))
    return json_bytes(_encoder.encode(quota))


async def list_namespaces(request: Request) -> Response:
    """GET /namespaces: the default namespace and each with a quota or jobs, by name, each with
    its quota and what it holds now; a key limited to namespaces sees only those."""
    who = caller(request)
    found = await _store(request).run(quotas.namespaces())
    seen = [view for view in found if who.sees(stored(view.name))]
    return json_bytes(_encoder.encode(seen))

"""The namespaces' quotas over HTTP (docs/GUIDE.md, Quotas): an admin sets one (PUT
/namespaces/{ns}/quota, audited), anyone with a key reads them with what each namespace holds
now (GET /namespaces: a key limited to namespaces sees only those). Enforcement is the
scripts' (store/scripts/lua/includes/quota.lua, admit.lua)."""

from __future__ import annotations

import time

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.hot import once_restored
from scheduler.api.http import HTTPError, caller, json_bytes, read_body, undecodable
from scheduler.api.state import store as _store
from scheduler.models.namespace import check_namespace, stored
from scheduler.models.quota import Quota
from scheduler.models.wire import DecodeError, decode_with
from scheduler.store.scripts import quotas

BODY_LIMIT = 4096
_decoder = msgspec.json.Decoder(Quota)
_encoder = msgspec.json.Encoder()


async def set_quota(request: Request) -> Response:
    """PUT /namespaces/{namespace}/quota {"running", "pending", "cpus", "memory_mb"}: 200 and
    the quota as stored (every limit 0 or absent: none). 400 for a name or limit out of
    bounds, nothing changed."""
    name: str = request.path_params["namespace"]
    check_namespace(name)  # InvalidInput: 400
    by = caller(request)
    if by.namespaces:  # a team's own admin would lift its limits
        raise HTTPError(
            403,
            f"forbidden: the key {by.name!r} is limited to namespaces: a quota is set by a key "
            "of every namespace",
        )
    try:
        quota = decode_with(_decoder, await read_body(request, BODY_LIMIT))
    except DecodeError as exc:
        raise undecodable("quota", exc) from None
    call = quotas.set_quota(stored(name), quota, time.time(), by)
    await once_restored(request.app.state, lambda: _store(request).run(call))
    return json_bytes(_encoder.encode(quota))


async def list_namespaces(request: Request) -> Response:
    """GET /namespaces: the default namespace and each with a quota or jobs, by name, each with
    its quota and what it holds now; a key limited to namespaces sees only those."""
    who = caller(request)
    found = await _store(request).run(quotas.namespaces())
    seen = [view for view in found if who.sees(stored(view.name))]
    return json_bytes(_encoder.encode(seen))

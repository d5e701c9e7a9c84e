"""The /keys API (docs/SECURITY.md, Named keys): an admin makes a named key with a role, lists
them and revokes one by name. Every call is the admin's (routes.TABLE); each change is in the
audit stream (scripts/access.py), and this process reads the keys again before answering, so
the key works (or stops) here at once and on the other replicas within KEYRING_REFRESH_SECS.
"""

from __future__ import annotations

import time

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.hot import once_restored
from scheduler.api.http import (
    HTTPError,
    caller,
    json_bytes,
    read_body,
    undecodable,
    whole_number,
)
from scheduler.api.params import param
from scheduler.api.state import credentials
from scheduler.api.state import store as _store
from scheduler.models.access_key import (
    ADMIN,
    ANYONE,
    AUDIT_PAGE,
    NAME_RE,
    KeyMade,
    KeyRequest,
    new_key,
    new_record,
)
from scheduler.models.wire import DecodeError, decode_with
from scheduler.store.errors import Conflict, KeyNotFound
from scheduler.store.scripts import access
from scheduler.store.scripts.access import AUDIT_MAX

BODY_LIMIT = 4096
# Names a key may not take: who did what says them for the admin key, and for anyone when
# no key is set.
RESERVED = frozenset({ADMIN.name, ANYONE.name})
_decoder = msgspec.json.Decoder(KeyRequest)
_encoder = msgspec.json.Encoder()


async def add_key(request: Request) -> Response:
    """POST /keys {"name", "role"}: 201 and the key, shown this once."""
    wanted = _decoded(await read_body(request, BODY_LIMIT))
    if not credentials(request).has_key:
        raise Conflict("named keys need TINYAWS_API_KEY set: without it the API asks no key")
    key, now, by = new_key(), time.time(), caller(request)
    record = new_record(wanted, key, now, by)
    await once_restored(
        request.app.state, lambda: _store(request).run(access.add_key(record, now, by))
    )
    await credentials(request).keyring.refresh(_store(request))
    made = KeyMade(**msgspec.structs.asdict(record.view()), key=key)
    return json_bytes(_encoder.encode(made), status=201)


def _decoded(body: bytes) -> KeyRequest:
    try:
        wanted = decode_with(_decoder, body)
    except DecodeError as exc:
        raise undecodable("key", exc) from None
    if wanted.name in RESERVED:
        names = " and ".join(sorted(RESERVED))
        raise HTTPError(400, f"invalid name: {names} are reserved (who did what says them)")
    return wanted


async def list_keys(request: Request) -> Response:
    """GET /keys: every named key by name, never the keys themselves."""
    _, records = await _store(request).run(access.keyring(-1))
    views = sorted((r.view() for r in records or ()), key=lambda v: v.name)
    return json_bytes(_encoder.encode(views))


async def audit(request: Request) -> Response:
    """GET /audit[?limit=N]: the newest admin calls (at most `limit`, default AUDIT_PAGE), newest
    first."""
    raw = param(request, "limit")
    limit = whole_number(raw, AUDIT_MAX)
    if raw and (limit is None or limit < 1):
        raise HTTPError(400, f"invalid limit: use 1 to {AUDIT_MAX}")
    entries = await _store(request).run(access.read_audit(limit or AUDIT_PAGE))
    return json_bytes(_encoder.encode(entries))


async def revoke_key(request: Request) -> Response:
    """DELETE /keys/{name}: 204; the key stops working (404: no key has that name)."""
    name: str = request.path_params["name"]
    if not NAME_RE.fullmatch(name):
        raise KeyNotFound()
    revoke = access.revoke_key(name, time.time(), caller(request))
    await once_restored(request.app.state, lambda: _store(request).run(revoke))
    await credentials(request).keyring.refresh(_store(request))
    return Response(status_code=204)

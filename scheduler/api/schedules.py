"""The /schedules API (docs/GUIDE.md, Schedules): create, list, read, pause, resume and delete named
schedules; routes.TABLE holds them behind the key, as the other operator routes.

A schedule's job template is shown in full, env_vars values included, to a key that sees
them on a job (a submitter or above); a reader sees their names, as on a job
(models/access_key.py). The web UI shows names only, as on a job's page.

A schedule belongs to its template's namespace (models/schedule.py namespace_of): a key
limited to namespaces lists only theirs, and one of another namespace is not found (404, as
a name no schedule has), whatever it asks of it.
"""

from __future__ import annotations

import time
import uuid

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.http import (
    HTTPError,
    caller,
    json_array,
    json_bytes,
    read_body,
    whole_number,
)
from scheduler.api.params import param
from scheduler.api.state import settings as _settings
from scheduler.api.state import store as _store
from scheduler.api.stores import Store
from scheduler.models.access_key import Principal
from scheduler.models.job import hide_env
from scheduler.models.schedule import (
    Schedule,
    ScheduleRequest,
    ScheduleView,
    namespace_of,
    new_schedule,
    paused,
    resumed,
    schedule_decoder,
    view,
)
from scheduler.models.wire import ID_RE, DecodeError, decode_with
from scheduler.store import ops
from scheduler.store.errors import ScheduleNotFound

DEFAULT_PAGE, MAX_PAGE = 1000, 10_000
_request_decoder = msgspec.json.Decoder(ScheduleRequest)
_encoder = msgspec.json.Encoder()


def _shown(request: Request, shown: ScheduleView, status: int = 200) -> Response:
    return json_bytes(_encoded(caller(request), shown), status=status)


def _encoded(by: Principal, shown: ScheduleView) -> bytes:
    """The schedule as `by` may see it: a reader's template without env_vars' values."""
    if not by.sees_secrets:
        shown = msgspec.structs.replace(shown, job=hide_env(shown.job))
    return _encoder.encode(shown)


def _name(request: Request) -> str:
    name: str = request.path_params["name"]
    if not ID_RE.fullmatch(name):
        raise ScheduleNotFound()
    return name


def decode_request(body: bytes) -> ScheduleRequest:
    """The body as a ScheduleRequest; 400 naming the field that is wrong."""
    try:
        return decode_with(_request_decoder, body)
    except DecodeError as exc:
        raise HTTPError(400, f"invalid schedule: {exc}") from None


async def create(request: Request) -> Response:
    """POST /schedules: 201 and the schedule; 409 if the name is taken (delete it first)."""
    body = await read_body(request, _settings(request).max_body_bytes)
    by = caller(request)
    schedule = new_schedule(decode_request(body), uuid.uuid4().hex, time.time(), by)
    await _store(request).run(ops.schedules.create_schedule(schedule))
    return _shown(request, view(schedule), status=201)


async def list_schedules(request: Request) -> Response:
    """GET /schedules[?after=NAME&limit=N]: a page by name (at most `limit`, default 1000)."""
    after, raw_limit = param(request, "after"), param(request, "limit")
    limit = whole_number(raw_limit, MAX_PAGE)
    if raw_limit and (limit is None or limit < 1):
        raise HTTPError(400, f"invalid limit: use 1 to {MAX_PAGE}")
    if after and not ID_RE.fullmatch(after):
        raise HTTPError(400, "invalid after: use a schedule name")
    by = caller(request)
    page = await seen_page(_store(request), by, after, limit or DEFAULT_PAGE)
    return json_array(_encoded(by, view(schedule)) for schedule in page)


async def seen_page(store: Store, by: Principal, after: str, limit: int) -> list[Schedule]:
    """At most `limit` schedules after `after` by name, those `by` sees: for a key limited to
    namespaces, pages are read on until it is full or none is left (schedules are few, so
    they are filtered here; a short page is the last, as clients read it)."""
    shown: list[Schedule] = []
    while True:
        page = await store.run(ops.schedules.list_schedules(after, limit))
        schedules = [schedule_decoder.decode(stored.record) for stored in page]
        shown += [s for s in schedules if by.sees(namespace_of(s))]
        if len(page) < limit or len(shown) >= limit:
            return shown[:limit]
        after = page[-1].name


async def get_schedule(request: Request) -> Response:
    blob = await _store(request).run(ops.schedules.schedule(_name(request)))
    if blob is None:
        raise ScheduleNotFound()
    schedule = schedule_decoder.decode(blob)
    if not caller(request).sees(namespace_of(schedule)):
        raise ScheduleNotFound()  # another namespace's: as one that does not exist
    return _shown(request, view(schedule))


async def delete_schedule(request: Request) -> Response:
    """DELETE /schedules/{name}: 204; the jobs it made stay."""
    scope = caller(request).scope
    await _store(request).run(ops.schedules.delete_schedule(_name(request), scope))
    return Response(status_code=204)


async def pause(request: Request) -> Response:
    """POST /schedules/{name}/pause: no tick fires until resumed (idempotent)."""
    pausing = ops.schedules.change_schedule(_name(request), paused, caller(request))
    return _shown(request, view(await _store(request).run(pausing)))


async def resume(request: Request) -> Response:
    """POST /schedules/{name}/resume: active again from now; ticks while paused are not made
    up. Resuming an active schedule changes nothing."""
    now = time.time()
    resuming = ops.schedules.change_schedule(
        _name(request), lambda s: resumed(s, now) if s.paused else s, caller(request)
    )
    return _shown(request, view(await _store(request).run(resuming)))

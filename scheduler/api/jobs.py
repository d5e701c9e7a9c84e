"""The /jobs API of CONTRACT 2.3 (and /health, /schedule) as Starlette endpoints; routes.TABLE
says which path and method each serves and who may call it.

Handlers are thin: decode and validate, call the store (one script, one round trip), send the
bytes the store returns. The hot calls' logic is hot.py's, which the hot lane calls too.
"""

from __future__ import annotations

import time

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api import hot, longpoll
from scheduler.api.http import (
    HTTPError,
    caller,
    declared_length,
    json_array,
    json_bytes,
    one_of,
    read_body,
    whole_number,
)
from scheduler.api.params import param
from scheduler.api.routing import PAGING, polls
from scheduler.api.state import agent_auth as _auth
from scheduler.api.state import node_source as _nodes
from scheduler.api.state import store as _store
from scheduler.models import poll
from scheduler.models.job import MAX_JOB_NUMBER, STATUSES, seen_by, shown_to
from scheduler.models.namespace import Scope, check_namespace, scope
from scheduler.models.wire import check_id
from scheduler.store import ops
from scheduler.store.scripts.jobs import Polled
from scheduler.store.scripts.listing import JobQuery


class Health(msgspec.Struct):
    """GET /health's answer, the original's."""

    service: str
    status: str


class Picked(msgspec.Struct):
    """GET /schedule's answer: the node a new job would go to ("" for none)."""

    node_id: str


HEALTH = msgspec.json.encode(Health("scheduler", "healthy"))
DEFAULT_PAGE, MAX_PAGE = 1000, 10_000
_NO_NODE_WITH_NAMESPACE = (
    "invalid node_id: a listing by namespace (namespace=, or any by a key limited to "
    "namespaces) takes no node_id"
)


async def health(request: Request) -> Response:
    """The original's answer, and nothing else: anyone may ask (load balancers, without a
    key), so it names no host, key or process. What the upgrade's watch finds (the layout
    before the hash tag in use: an old worker's host, old keys) is in the log and the gauge
    scheduler_old_layout_findings, behind the key (api/upgrade.py)."""
    return json_bytes(HEALTH)


async def schedule(request: Request) -> Response:
    placement = await _nodes(request).placement("")
    node_id = await _store(request).run(ops.jobs.pick(placement, time.time()))
    return json_bytes(msgspec.json.encode(Picked(node_id)))


async def submit_job(request: Request) -> Response:
    key = request.headers.get("idempotency-key", "")
    created = await hot.create_job(request.app.state, _body_of(request), key, caller(request))
    return json_bytes(created.job, status=200 if created.duplicate else 201)


def _body_of(request: Request) -> hot.BodyReader:
    async def read(limit: int, charge: hot.Charge) -> bytes:
        return await read_body(request, limit, charge)

    return read


def _page(request: Request) -> tuple[int, int, bool]:
    """(limit, bound, newest): the default order pages on with `after` (ascending, as the
    original); `order=newest` lists newest first and pages on with `before`."""
    raw_limit, raw_order = param(request, "limit"), param(request, "order")
    limit = whole_number(raw_limit, MAX_PAGE)
    if raw_limit and (limit is None or limit < 1):
        raise HTTPError(400, f"invalid limit: use 1 to {MAX_PAGE}")
    if raw_order not in ("", "oldest", "newest"):
        raise HTTPError(400, "invalid order: use oldest or newest")
    newest = raw_order == "newest"
    name, other = ("before", "after") if newest else ("after", "before")
    if param(request, other):
        raise HTTPError(400, f"invalid {other}: use {name} with order={raw_order or 'oldest'}")
    raw_bound = param(request, name)
    # No job number is above MAX_JOB_NUMBER (it is the score, exact as a double).
    bound = whole_number(raw_bound.removeprefix("job-"), MAX_JOB_NUMBER)
    if raw_bound and (not raw_bound.startswith("job-") or bound is None):
        raise HTTPError(400, f"invalid {name}: use a job id like job-42")
    return (limit or DEFAULT_PAGE), (bound or 0), newest


def _polled(request: Request, polled: Polled) -> Response:
    body, headers = hot.polled_reply(polled, _store(request).settings.max_jobs_per_node)
    return Response(body + b"\n", media_type="application/json", headers=headers)


async def list_jobs(request: Request) -> Response:
    node_id, status = param(request, "node_id"), param(request, "status")
    hot.check_node_id(node_id)
    store = _store(request)
    wait = longpoll.wait_secs(request)
    if polls(node_id, status, any(param(request, name) for name in PAGING)):
        capacity, claims = param(request, poll.CAPACITY), param(request, poll.CLAIMS)
        poller = hot.poller(node_id, _auth(request).caller(request), capacity, claims)
        if wait is None:
            return _polled(request, await store.run(ops.jobs.poll(poller)))
        polled = await longpoll.unless_disconnected(request, store.poll_wait(poller, wait))
        return _polled(request, polled or Polled([], []))
    if wait is not None:
        raise HTTPError(400, "wait is the agent's poll: node_id and status=pending, no paging")
    one_of("status", status, STATUSES)  # after the poll's branch: a poll pays nothing for it
    schedule = _schedule(request, node_id, status)
    by = caller(request)
    covered = listed_scope(request, by.namespaces, node_id)
    limit, bound, newest = _page(request)
    if newest and bound == 0 and param(request, "before"):
        return json_array([])  # before=job-0: nothing is older
    query = JobQuery(node_id, status, bound, limit, covered, newest)
    if schedule:
        page = ops.schedules.schedule_jobs(schedule, query)
    else:
        page = ops.listings.list_jobs(query)
    found = await store.run(page)
    return json_array(found if by.sees_secrets else [shown_to(by, job) for job in found])


def listed_scope(request: Request, limited: tuple[str, ...], node_id: str) -> Scope:
    """The namespaces a listing covers (models/namespace.py scope): `namespace` if given,
    else all the caller's key is limited to (`limited`), which is every one for most keys;
    one it may not read covers none (an empty page, as for a namespace with no jobs). A
    node's jobs are indexed by node, not namespace, so a node's listing cannot page one
    namespace's exactly: it takes no namespace, and a limited key lists none."""
    asked = param(request, "namespace")
    check_namespace(asked)
    covered = scope(limited, asked)
    if node_id and covered is not None:
        raise HTTPError(400, _NO_NODE_WITH_NAMESPACE)
    return covered


def _schedule(request: Request, node_id: str, status: str) -> str:
    """The schedule whose jobs are listed ("": none), a schedule's name (models/schedule.py:
    checked as one). Alone: its index holds its jobs by number, one index per filter
    combination (library.py listing_ids), and one per schedule and status would have to
    follow every change of status."""
    schedule = param(request, "schedule")
    if schedule:
        check_id("schedule", schedule)
        if node_id or status:
            raise HTTPError(400, "invalid schedule: use it without node_id and status")
    return schedule


def _job_id(request: Request) -> str:
    return hot.job_id_or_404(request.path_params["job_id"])


async def get_job(request: Request) -> Response:
    job_id, wait, by = _job_id(request), longpoll.wait_secs(request), caller(request)
    if wait is None:
        return json_bytes(await hot.read_job(_store(request), job_id, by))
    # Another namespace's job is not waited on: answered at once, as one that does not exist.
    seen = None if not by.namespaces else lambda blob: seen_by(by, blob)
    waiting = _store(request).get_wait(job_id, longpoll.status_not(request), wait, seen)
    return json_bytes(hot.job_for(by, await longpoll.unless_disconnected(request, waiting)))


async def get_attempts(request: Request) -> Response:
    """The job's ended attempts, oldest first (models/attempt.py): kept apart from the
    record, which GET /jobs/{id} answers as the original's clients know it."""
    attempts = ops.jobs.attempts(_job_id(request), caller(request).scope)
    return json_array(await _store(request).run(attempts))


async def get_place(request: Request) -> Response:
    """A pending job's place in the queue it waits in ({} in none: models/queue_place.py)."""
    place = ops.jobs.queue_place(_job_id(request), caller(request).scope)
    return json_bytes(msgspec.json.encode(await _store(request).run(place)))


async def update_job(request: Request) -> Response:
    """An agent's report (hot.report_job)."""
    report = (_job_id(request), _auth(request).caller(request), declared_length(request))
    return json_bytes(await hot.report_job(request.app.state, report, _body_of(request)))


async def cancel_job(request: Request) -> Response:
    """DELETE /jobs/{id} (the key): a pending job is cancelled at once, a running one is
    cancelling until its agent has killed it (store/scripts/jobs.py, CANCEL_JOB)."""
    by = caller(request)
    cancel = ops.jobs.cancel(_job_id(request), time.time(), by.who, by.scope)
    return json_bytes(await _store(request).run(cancel))

"""Retry by hand (the key): POST /jobs/{id}/retry starts a failed job over, POST /jobs/retry
does so for a list of ids (the dead set: GET /jobs?status=failed). store/scripts/retry.py,
RETRY_JOBS, says what a retry changes."""

from __future__ import annotations

import time

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api import hot
from scheduler.api.http import HTTPError, caller, json_bytes, read_body, undecodable
from scheduler.api.state import node_source as _nodes
from scheduler.api.state import store as _store
from scheduler.models.job import job_number
from scheduler.models.retry import MAX_IDS, REFUSALS, RetryAnswer, RetryRequest, blocked_words
from scheduler.models.wire import ID_RE, DecodeError, decode_with
from scheduler.store import ops
from scheduler.store.scripts import codes
from scheduler.store.scripts.retry import Retried

_decoder = msgspec.json.Decoder(RetryRequest)
_ANSWER_LISTS = {
    codes.OK: "retried",
    codes.NOT_FOUND: "not_found",
    codes.NOT_FAILED: "not_failed",
    codes.NO_NODES: "unplaced",
    codes.BLOCKED: "blocked",
    codes.TOO_MANY: "too_many_waiters",
}


async def _retry(request: Request, job_ids: list[str]) -> list[Retried]:
    placement = await _nodes(request).placement("")
    by = caller(request)
    retry = ops.jobs.retry(job_ids, placement, time.time(), by.who, by.scope)
    return await _store(request).run(retry)


def check_job_ids(field: str, job_ids: list[str], limit: int) -> None:
    """A list of ids to retry, as a request gives it: 1 to `limit` ids, each an id (400)."""
    if not 1 <= len(job_ids) <= limit:
        raise HTTPError(400, f"invalid {field}: give 1 to {limit} job ids")
    bad = next((job_id for job_id in job_ids if not ID_RE.fullmatch(job_id)), None)
    if bad is not None:
        raise HTTPError(400, f"invalid {field}: {bad[:64]!r} is not a job id")


async def retry_ids(request: Request, job_ids: list[str]) -> list[Retried]:
    """Each once, oldest first: a job's dependencies are older, so they start over before it
    looks at them."""
    ordered = sorted(dict.fromkeys(job_ids), key=lambda job_id: job_number(job_id) or 0)
    return await _retry(request, ordered)


async def retry_one(request: Request, job_id: str) -> bytes:
    """The job, pending again; 404, 409 or 503 when it cannot be."""
    [done] = await _retry(request, [job_id])
    if done.code == codes.NOT_FOUND:
        raise HTTPError(404, REFUSALS["not_found"])
    if done.code == codes.NOT_FAILED:
        raise HTTPError(409, REFUSALS["not_failed"])
    if done.code == codes.NO_NODES:
        raise HTTPError(503, REFUSALS["unplaced"])
    if done.code == codes.BLOCKED:
        raise HTTPError(409, blocked_words(done.blocked_by))
    if done.code == codes.TOO_MANY:
        raise HTTPError(409, REFUSALS["too_many_waiters"])
    return done.job


async def retry_job(request: Request) -> Response:
    """POST /jobs/{id}/retry: the job, pending again (200)."""
    return json_bytes(await retry_one(request, hot.job_id_or_404(request.path_params["job_id"])))


async def retry_jobs(request: Request) -> Response:
    """POST /jobs/retry {"job_ids": [...]}: which were retried, and why the others were not."""
    body = await read_body(request, request.app.state.settings.max_body_bytes)
    try:
        job_ids = decode_with(_decoder, body).job_ids
    except DecodeError as exc:
        raise undecodable("body", exc) from None
    check_job_ids("job_ids", job_ids, MAX_IDS)
    answer = RetryAnswer([], [], [], [], [])
    for done in await retry_ids(request, job_ids):
        if done.code == codes.TOO_MANY and answer.too_many_waiters is msgspec.UNSET:
            answer.too_many_waiters = []
        if done.code == codes.BLOCKED:
            if answer.blocked_by is msgspec.UNSET:
                answer.blocked_by = {}
            answer.blocked_by[done.job_id] = done.blocked_by
        getattr(answer, _ANSWER_LISTS[done.code]).append(done.job_id)
    return json_bytes(msgspec.json.encode(answer))

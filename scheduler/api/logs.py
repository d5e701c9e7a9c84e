"""A running job's live output (docs/GUIDE.md, Watching jobs): its agent's chunks in
(POST /jobs/{id}/output, our agent only), the output read (GET /jobs/{id}/logs, text) and
followed (`?follow=1`, Server-Sent Events: follow.py says why) from any replica; followed too
by the web UI's job page (GET /ui/jobs/{id}/logs, the same stream behind the login)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from scheduler.api import hot
from scheduler.api.described import stream
from scheduler.api.follow import (
    SSE_HEADERS,
    Read,
    follow,
    follows,
    positions,
    sse,
    while_key_held,
)
from scheduler.api.http import (
    NO_STORE,
    HTTPError,
    caller,
    json_bytes,
    one_of,
    read_body,
    undecodable,
    whole_number,
)
from scheduler.api.params import param
from scheduler.api.state import agent_auth
from scheduler.api.state import store as store_of
from scheduler.api.stores import Store
from scheduler.models.job import FINAL_STATUSES
from scheduler.models.log import (
    CHUNK_BODY_MAX_BYTES,
    LOG_STREAMS,
    Accepted,
    Dropped,
    Ended,
    OffsetConflict,
    Output,
    Status,
    chunk_decoder,
)
from scheduler.models.wire import DecodeError, InvalidInput, decode_with
from scheduler.store import ops
from scheduler.store.errors import OffsetMismatch
from scheduler.store.scripts.logs import Chunk, LogPage

# A follower's read: about this many bytes of output (one chunk at least).
FOLLOW_READ_BYTES = 256 * 1024
MAX_ATTEMPT = 1_000_000
# What the API's route reads; the UI's follows always (routes.py).
READS = ("stream", "attempt", "follow", "after")
FOLLOW_READS = ("stream", "attempt", "after")
_encode = msgspec.json.encode
# What a follower streams (routes.TABLE: GET /jobs/{id}/logs?follow=1, /ui/jobs/{id}/logs).
FOLLOWED = stream(
    "the output as events (`output`'s id is the position to resume after); `end`, the last, "
    "once the job has ended",
    status=Status,
    output=Output,
    dropped=Dropped,
    end=Ended,
)


async def post_output(request: Request) -> Response:
    """A chunk of the job's output from the agent running it; answers the stream's next
    offset, or 409 with the offset to send from."""
    job_id = hot.job_id_or_404(request.path_params["job_id"])
    caller = agent_auth(request).caller(request)
    body = await read_body(request, CHUNK_BODY_MAX_BYTES)
    try:
        chunk = decode_with(chunk_decoder, body)
        chunk.check()
    except (DecodeError, InvalidInput) as exc:
        raise undecodable("output", exc) from None
    hot.check_node_id(chunk.node_id)
    append = ops.logs.append_output(
        job_id, caller, chunk.node_id, chunk.stream, chunk.offset, chunk.data
    )
    try:
        offset = await store_of(request).run(append)
    except OffsetMismatch as exc:
        return json_bytes(_encode(OffsetConflict(str(exc), exc.offset)), status=409)
    return json_bytes(_encode(Accepted(offset)))


async def get_logs(request: Request) -> Response:
    """The output of one attempt (the job's latest unless `attempt` says), as text; with
    `follow`, as events from then on (`followed`)."""
    job_id, stream, attempt = _asked(request)
    if follows(request, default=False):
        return await followed(request, job_id, stream, attempt)
    store = store_of(request)
    budget, scope = store.settings.log_max_bytes, caller(request).scope
    page = await store.run(ops.logs.read_log(job_id, "", budget, scope))
    if attempt > page.attempt:  # not made yet: said, not answered as an empty output
        raise HTTPError(404, f"attempt not found: {job_id} is at attempt {page.attempt}")
    return _text(page, attempt or page.attempt, stream)


async def follow_logs(request: Request) -> Response:
    """The output followed, always (the web UI's GET /ui/jobs/{id}/logs, behind its login:
    the job page's live output, ui_live.py): as GET /jobs/{id}/logs?follow=1."""
    return await followed(request, *_asked(request))


async def followed(request: Request, job_id: str, stream: str, attempt: int) -> Response:
    """The output of `attempt` (0: the job's latest) and of any later attempt, as events,
    after the position `after`/Last-Event-ID (else from the attempt's start) until the job
    ends: the one follower of a job's output, whichever route asked."""
    given = positions(request)
    if given is not None and len(given) != 1:
        raise HTTPError(400, "invalid after: use the id of an event this stream sent")
    position = given[0] if given else ""
    store, scope = store_of(request), caller(request).scope
    # Before the stream starts: its 404 (another namespace's job's too), and which attempt
    # is the latest. Its output is read again once the stream watches for more (a chunk
    # between the two is not missed).
    now = await store.run(ops.logs.read_log(job_id, position, 1, scope))
    tail = LogTail(store, job_id, stream, attempt or (0 if position else now.attempt), scope)
    return StreamingResponse(
        while_key_held(request, tail.events(position)),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def _asked(request: Request) -> tuple[str, str, int]:
    """The job, stream ("": both) and attempt (0: the latest) a request for the output asks."""
    job_id = hot.job_id_or_404(request.path_params["job_id"])
    stream = one_of("stream", param(request, "stream"), LOG_STREAMS)
    return job_id, stream, _attempt(request)


def _text(page: LogPage, attempt: int, stream: str) -> Response:
    text = b"".join(c.text for c in page.chunks if c.attempt == attempt and _in(c, stream))
    headers = {**NO_STORE, "x-attempt": str(attempt), "x-log-dropped": str(page.dropped)}
    return Response(text, media_type="text/plain; charset=utf-8", headers=headers)


def _in(chunk: Chunk, stream: str) -> bool:
    return not stream or chunk.stream == stream


def _attempt(request: Request) -> int:
    raw = param(request, "attempt")
    number = whole_number(raw, MAX_ATTEMPT)
    if raw and not number:
        raise HTTPError(400, "invalid attempt: use an attempt number, 1 or more")
    return number or 0


class LogTail:
    """One follower of a job's output: its position, which attempts and stream it shows, and
    the bytes the log had been written up to what it last read (a gap is what it missed)."""

    def __init__(
        self, store: Store, job_id: str, stream: str, attempt: int, scope: str = ""
    ) -> None:
        self.store, self.job_id, self.stream, self.attempt = store, job_id, stream, attempt
        self.scope = scope  # its caller's namespaces (models/namespace.py scope)
        self.position = ""
        # The bytes the log was written up to the last chunk read (-1: not known), and that
        # chunk's attempt (0: none read yet): a gap before a chunk of the attempt read last is
        # output the follower missed, as is one before the first chunk of a follower from the
        # log's start (trimmed, earlier attempts' bytes counted in: no attempt's start is kept).
        self.written, self.last_attempt = -1, 0
        self.status = ""  # the job's, as last told

    async def events(self, position: str) -> AsyncGenerator[bytes, None]:
        self.position, self.written = position, -1 if position else 0
        shard = await self.store.client_of_job(self.job_id)
        keys, notifier = shard.keys, shard.notifier
        channels = [(notifier, keys.log_channel(self.job_id))]
        channels.append((notifier, keys.job_channel(self.job_id)))  # its end

        async def read() -> Read:
            read_log = ops.logs.read_log(self.job_id, self.position, FOLLOW_READ_BYTES, self.scope)
            return self.read(await self.store.run(read_log))

        most = self.store.settings.follow_max_secs
        async for event in follow(channels, read, lambda: notifier.closing, most):
            yield event

    def read(self, page: LogPage) -> Read:
        events = []
        if page.status != self.status:  # the first read's, then each change (a retry...)
            self.status = page.status
            events.append(sse("status", _encode(Status(page.status))))
        events += [event for chunk in page.chunks for event in self._chunk(chunk)]
        if page.status in FINAL_STATUSES and not page.more:
            events.append(sse("end", _encode(Ended(page.status, page.exit_code))))
            return Read(events, over=True)
        return Read(events, more=page.more)

    def _chunk(self, chunk: Chunk) -> list[bytes]:
        out = []
        ours = chunk.attempt >= self.attempt and self.last_attempt in (0, chunk.attempt)
        if ours and 0 <= self.written < chunk.written:
            out.append(sse("dropped", _encode(Dropped(chunk.written - self.written))))
        self.position, self.written = chunk.position, chunk.written + len(chunk.text)
        self.last_attempt = chunk.attempt
        if chunk.attempt >= self.attempt and _in(chunk, self.stream):
            text = str(chunk.text, "utf-8", "replace")
            data = _encode(Output(chunk.stream, chunk.attempt, text))
            out.append(sse("output", data, chunk.position))
        return out

"""GET /events: every job's status changes as Server-Sent Events (models/event.py; docs/GUIDE.md,
Watching jobs), from any replica, resumable after a position, filtered by job, node, status,
schedule or namespace; a key limited to namespaces gets only theirs (filtered here, as it reads).

A position names a place in each shard's stream: the ids of the last event read on each,
joined by commas (one shard: one id, `1733450000000-0`). Without one a follower starts from
now; `after=0` starts from the oldest event kept. A stream begins with its starting position
(an `id:` line alone), so a client that reconnects before any event loses none. Events are
numbered per shard, one number after another: a follower that finds a number skipped
(trimmed before it read them: EVENTS_RETAIN_SECS, models/event.py EVENTS_KEPT) is told with a
`dropped` event, which counts them unless the event it resumed after is gone too.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from scheduler.api.follow import (
    SSE_HEADERS,
    Read,
    follow,
    follows,
    positions,
    sse,
    while_key_held,
)
from scheduler.api.hot import check_node_id
from scheduler.api.http import HTTPError, caller, one_of
from scheduler.api.params import param
from scheduler.api.state import store as store_of
from scheduler.api.stores import Store
from scheduler.models.event import Event
from scheduler.models.job import STATUSES
from scheduler.models.namespace import Scope, check_namespace, in_scope, scope
from scheduler.models.wire import check_id, rfc3339
from scheduler.store import ops
from scheduler.store.ops.logs import RawEvent

READS = ("job_id", "node_id", "status", "schedule", "namespace", "after", "follow")
# Events read from each shard at once.
READ_COUNT = 500
BEFORE_ALL = "0-0"  # a position before any event (Redis' ids start above it)
_encode = msgspec.json.encode


@dataclass(frozen=True, slots=True)
class Filter:
    """What a follower asked for ("": any), and the namespaces it may read (`covered`)."""

    job_id: str = ""
    node_id: str = ""
    status: str = ""
    schedule: str = ""
    covered: Scope = None

    def passes(self, fields: dict[str, str]) -> bool:
        return (
            (not self.job_id or fields.get("job") == self.job_id)
            and (not self.node_id or self.node_id in (fields.get("node"), fields.get("was")))
            and (not self.status or fields.get("to") == self.status)
            and (not self.schedule or fields.get("schedule") == self.schedule)
            # An event written before namespaces has none: the default's, as its job.
            and in_scope(self.covered, fields.get("ns", ""))
        )


def _filter(request: Request) -> Filter:
    job_id, node_id = param(request, "job_id"), param(request, "node_id")
    if job_id:
        check_id("job_id", job_id)
    check_node_id(node_id)
    schedule = param(request, "schedule")
    if schedule:
        check_id("schedule", schedule)
    status = one_of("status", param(request, "status"), STATUSES)
    namespace = param(request, "namespace")
    check_namespace(namespace)
    covered = scope(caller(request).namespaces, namespace)
    return Filter(job_id, node_id, status, schedule, covered)


def _positions(request: Request, shards: int) -> list[str]:
    """Each shard's place: after this id (BEFORE_ALL: from its oldest), "$" from now on."""
    if param(request, "after") == "0" and not request.headers.get("last-event-id"):
        return [BEFORE_ALL] * shards
    given = positions(request)
    if given is None:
        return ["$"] * shards
    if len(given) != shards:
        raise HTTPError(400, "invalid after: use 0, or the id of an event this stream sent")
    return given


async def events(request: Request) -> Response:
    """The events after the position, then (unless follow=0) each as it happens."""
    store = store_of(request)
    tail = EventTail(store, _filter(request), _positions(request, len(store.shards)))
    stream = while_key_held(request, tail.events(follows(request, default=True)))
    return StreamingResponse(stream, media_type="text/event-stream", headers=SSE_HEADERS)


class EventTail:
    """One follower of the events: each shard's position and the last number it saw there."""

    def __init__(self, store: Store, wanted: Filter, positions: list[str]) -> None:
        self.store, self.wanted, self.positions = store, wanted, positions
        self.numbers: list[int | None] = [None] * len(positions)
        # A position given: its own event is read first (then skipped) for its number, so
        # what was trimmed after it is counted; gone itself, the gap is told uncounted.
        self.resuming = [p not in (BEFORE_ALL, "$") for p in positions]

    async def events(self, follows: bool) -> AsyncGenerator[bytes, None]:
        await self._start()
        # Where it starts, as an event with no data (a client keeps it as its last id and
        # dispatches nothing): one that reconnects before any event resumes from here.
        yield f"id: {','.join(self.positions)}\n\n".encode()
        channels = [(shard.notifier, shard.keys.events_channel) for shard in self.store.shards]
        notifiers = [shard.notifier for shard in self.store.shards]

        async def read() -> Read:
            got = await self.read()
            return Read(got.events, over=not follows and not got.more, more=got.more)

        closing, most = (
            (lambda: any(n.closing for n in notifiers)),
            self.store.settings.follow_max_secs,
        )
        async for event in follow(channels, read, closing, most):
            yield event

    async def _start(self) -> None:
        """ "From now on" made a position (each shard's newest event), so a wait misses none."""
        if "$" in self.positions:
            for raw in await self.store.run(ops.logs.events_after(tuple(self.positions), 1)):
                self.positions[raw.shard] = raw.position
                self.numbers[raw.shard] = int(raw.fields.get("n", 0)) or None
            self.positions = [BEFORE_ALL if p == "$" else p for p in self.positions]

    async def read(self) -> Read:
        pairs = zip(self.positions, self.resuming, strict=True)
        starts = tuple("=" + position if resuming else position for position, resuming in pairs)
        found = await self.store.run(ops.logs.events_after(starts, READ_COUNT))
        counts = [0] * len(self.positions)
        out: list[bytes] = []
        for raw in found:
            counts[raw.shard] += 1
            out += self._event(raw)
        return Read(out, more=max(counts, default=0) >= READ_COUNT)

    def _event(self, raw: RawEvent) -> list[bytes]:
        out = []
        number, last = int(raw.fields["n"]), self.numbers[raw.shard]
        if self.resuming[raw.shard]:
            self.resuming[raw.shard] = False
            if raw.position == self.positions[raw.shard]:
                self.numbers[raw.shard] = number
                return []
            out.append(sse("dropped", _encode({"shard": raw.shard})))
        if last is not None and number > last + 1:
            out.append(sse("dropped", _encode({"shard": raw.shard, "events": number - last - 1})))
        self.numbers[raw.shard] = number
        self.positions[raw.shard] = raw.position
        if self.wanted.passes(raw.fields):
            data = _encode(_as_event(number, raw))
            out.append(sse("job", data, ",".join(self.positions)))
        return out


def _as_event(number: int, raw: RawEvent) -> Event:
    f = raw.fields
    at = rfc3339(int(raw.position.split("-", 1)[0]) / 1000)
    return Event(
        number=number,
        job_id=f["job"],
        status=f["to"],
        at=at,
        old_status=f.get("from", ""),
        node_id=f.get("node", ""),
        old_node_id=f.get("was", ""),
        schedule=f.get("schedule", ""),
        failure_reason=f.get("reason", ""),
        namespace=f.get("ns", ""),
    )

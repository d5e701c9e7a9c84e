"""GET /events: every job's status changes as Server-Sent Events (models/event.py; docs/GUIDE.md,
Watching jobs), from any replica, resumable after a position, filtered by job, node, status or
schedule.

A position names a place in each shard's stream: the ids of the last event read on each,
joined by commas (one shard: one id, `1733450000000-0`). Without one a follower starts from
now; `after=0` starts from the oldest event kept. A stream begins with its starting position
(an `id:` line alone), so a client that reconnects before any event loses none. Events are
numbered by job (models/event.py); a follower counts its place in each shard's stream by the
stream's own count of entries added, so one that events were trimmed from before it read them
(EVENTS_RETAIN_SECS, models/event.py EVENTS_KEPT) is told with a `dropped` event, which
counts them unless the event it resumed after is gone too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from scheduler.api.follow import SSE_HEADERS, Read, follow, follows, positions, sse
from scheduler.api.hot import check_node_id
from scheduler.api.http import HTTPError, one_of
from scheduler.api.params import param
from scheduler.api.state import store as store_of
from scheduler.api.stores import Store
from scheduler.models.event import Event, event_of
from scheduler.models.job import STATUSES
from scheduler.models.wire import check_id, rfc3339
from scheduler.store import ops
from scheduler.store.ops.logs import RawEvent, ShardEvents

READS = ("job_id", "node_id", "status", "schedule", "after", "follow")
# Events read from each shard at once.
READ_COUNT = 500
BEFORE_ALL = "0-0"  # a position before any event (Redis' ids start above it)
_encode = msgspec.json.encode


@dataclass(frozen=True, slots=True)
class Filter:
    """What a follower asked for ("": any)."""

    job_id: str = ""
    node_id: str = ""
    status: str = ""
    schedule: str = ""

    def passes(self, fields: dict[str, str]) -> bool:
        return (
            (not self.job_id or fields.get("job") == self.job_id)
            and (not self.node_id or self.node_id in (fields.get("node"), fields.get("was")))
            and (not self.status or fields.get("to") == self.status)
            and (not self.schedule or fields.get("schedule") == self.schedule)
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
    return Filter(job_id, node_id, status, schedule)


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
    stream = tail.events(follows(request, default=True))
    return StreamingResponse(stream, media_type="text/event-stream", headers=SSE_HEADERS)


class EventTail:
    """One follower of the events: each shard's position, and how many entries its stream had
    had added up to that place (its ordinal there) when known."""

    def __init__(self, store: Store, wanted: Filter, positions: list[str]) -> None:
        self.store, self.wanted, self.positions = store, wanted, positions
        # A position given, its ordinal is not known: it is read again (the first entry of
        # the next read, and skipped) until a read reaches the stream's newest event, so
        # one gone meanwhile is told (uncounted); from the oldest kept, it is the count
        # trimmed before it (none of those is dropped for this follower).
        self.ordinals: list[int | None] = [None] * len(positions)

    async def events(self, follows: bool) -> AsyncIterator[bytes]:
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
        """ "From now on" made a position (each shard's newest event, whose ordinal is the
        count added), so a wait misses none."""
        if "$" in self.positions:
            for read in await self.store.run(ops.logs.events_after(tuple(self.positions), 1)):
                if self.positions[read.shard] == "$":
                    self.ordinals[read.shard] = read.added
                    latest = read.events[-1].position if read.events else BEFORE_ALL
                    self.positions[read.shard] = latest

    async def read(self) -> Read:
        starts = tuple(
            "=" + position if ordinal is None and position != BEFORE_ALL else position
            for position, ordinal in zip(self.positions, self.ordinals, strict=True)
        )
        out: list[bytes] = []
        more = False
        for read in await self.store.run(ops.logs.events_after(starts, READ_COUNT)):
            out += self._shard(read)
            more = more or len(read.events) >= READ_COUNT
        return Read(out, more=more)

    def _shard(self, read: ShardEvents) -> list[bytes]:
        """A shard's events read: the trimmed ones it missed told (`dropped`), then each."""
        shard, position = read.shard, self.positions[read.shard]
        ordinal, events, out = self.ordinals[shard], read.events, []
        if ordinal is None and position == BEFORE_ALL:
            ordinal = read.trimmed
        elif ordinal is None:  # read from its own place on: there still, or trimmed
            if events and events[0].position == position:
                events = events[1:]
            else:
                out.append(sse("dropped", _encode({"shard": shard})))
        if ordinal is not None and read.trimmed > ordinal:
            out.append(sse("dropped", _encode({"shard": shard, "events": read.trimmed - ordinal})))
            ordinal = read.trimmed
        for raw in events:
            self.positions[shard] = raw.position
            if self.wanted.passes(raw.fields):
                data = _encode(_as_event(raw))
                out.append(sse("job", data, ",".join(self.positions)))
        if ordinal is not None:
            ordinal += len(events)
        elif len(read.events) < READ_COUNT:  # it read up to the newest: the count added
            ordinal = read.added
        self.ordinals[shard] = ordinal
        return out


def _as_event(raw: RawEvent) -> Event:
    return event_of(raw.fields, rfc3339(int(raw.position.split("-", 1)[0]) / 1000))

"""The operations that read what jobs do: their output (read, or followed as it comes) and
the events of every job's status changes, each a plan (steps.py); ops.py lists them all."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from scheduler.client import calls, sse
from scheduler.client.errors import api_error
from scheduler.client.models import EventItem, EventsDropped, JobEvent, LogEvent, Logs
from scheduler.client.sse import Event
from scheduler.client.steps import Feed, Flow, Reply, Request
from scheduler.models.event import Event as StatusChange
from scheduler.models.log import Dropped, Ended, Output, Status


def _logs(reply: Reply) -> Logs:
    if reply.status >= 400:
        raise api_error(reply.status, reply.body, reply.headers)
    attempt, dropped = reply.headers.get("x-attempt", "0"), reply.headers.get("x-log-dropped", "0")
    return Logs(
        reply.body.decode("utf-8", "replace"),
        int(attempt) if attempt.isdigit() else 0,
        int(dropped) if dropped.isdigit() else 0,
    )


def logs(job_id: str, /, *, stream: str = "", attempt: int = 0) -> Flow[Logs]:
    """The output of the job's latest attempt (or `attempt`), both streams or one
    (`stream`: stdout, stderr), as far as it has come."""
    params = calls.given(stream=stream, attempt=str(attempt or ""))
    return (
        yield from calls.call(_logs, "GET", calls.path("jobs", job_id, "logs"), True, params=params)
    )


_LOG_EVENTS: dict[str, Callable[[str], LogEvent]] = {
    "output": msgspec.json.Decoder(Output).decode,
    "status": msgspec.json.Decoder(Status).decode,
    "end": msgspec.json.Decoder(Ended).decode,
    "dropped": msgspec.json.Decoder(Dropped).decode,
}


def follow_logs(job_id: str, /, *, stream: str = "", attempt: int = 0) -> Feed[LogEvent]:
    """The job's output as it comes (`Output` chunks; `Status` changes; `Dropped` when
    output was trimmed before it was read), until its `Ended`, the last item. A lost
    connection is resumed where it was, nothing read twice."""
    params = {**calls.given(stream=stream, attempt=str(attempt or "")), "follow": "1"}
    request = Request("GET", calls.path("jobs", job_id, "logs"), params=params)
    yield from calls.mapped(
        sse.follow(request), _log_event, until=lambda item: isinstance(item, Ended)
    )


def _ended(item: LogEvent) -> bool:
    return isinstance(item, Ended)


def _log_event(event: Event) -> list[LogEvent]:
    read = _LOG_EVENTS.get(event.name)
    return [] if read is None else [calls.read_event(read, event)]  # else: a newer server's


def events(
    *,
    job_id: str = "",
    node_id: str = "",
    status: str = "",
    schedule: str = "",
    namespace: str = "",
    after: str = "",
    since_start: bool = False,
    follow: bool = True,
) -> Feed[EventItem]:
    """Every job's status changes as they happen (or this job's, node's, status's,
    schedule's, namespace's; a key limited to namespaces gets only theirs), from now, from
    the oldest kept (`since_start`), or after a `position` an earlier event carried; with
    `follow=False` those kept, then the iteration ends. Each is a `JobEvent`, or
    `EventsDropped` for changes trimmed before they were read."""
    params = calls.given(
        job_id=job_id,
        node_id=node_id,
        status=status,
        schedule=schedule,
        namespace=namespace,
        after="0" if since_start else after,
        follow="" if follow else "0",
    )
    feed = sse.follow(Request("GET", "/events", params=params), ends_at_eof=not follow)
    yield from calls.mapped(feed, _job_event)


_status_change = msgspec.json.Decoder(StatusChange).decode


_dropped = msgspec.json.Decoder(dict[str, int]).decode


def _job_event(event: Event) -> list[EventItem]:
    if event.name == "job":
        return [JobEvent(calls.read_event(_status_change, event), event.id)]
    if event.name == "dropped":
        dropped = calls.read_event(_dropped, event)
        return [EventsDropped(event.id, dropped.get("shard", 0), dropped.get("events", -1))]
    return []

"""Every operation of the client, written once as a plan (steps.py): what it sends, whether
sending it again is safe (retrying.py), and how its answer is read. `Client` and
`AsyncClient` (client.py) bind each as a method, blocking or awaited; its docstring is the
method's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec

from scheduler.client import sse
from scheduler.client.errors import SchedulerError, WaitTimeout, api_error
from scheduler.client.models import (
    BatchEntry,
    EventItem,
    EventsDropped,
    JobEvent,
    LogEvent,
    Logs,
    Schedule,
    read_entry,
)
from scheduler.client.retrying import send
from scheduler.client.sse import Event
from scheduler.client.steps import NOW, Feed, Flow, Item, Reply, Request, Sleep, Step
from scheduler.models.attempt import Attempt
from scheduler.models.batch import MAX_JOBS
from scheduler.models.event import Event as StatusChange
from scheduler.models.job import FINAL_STATUSES, Job
from scheduler.models.log import Dropped, Ended, Output, Status
from scheduler.models.registry import Node, NodeDrained, NodeUndrained
from scheduler.models.retry import MAX_IDS, RetryAnswer

T = TypeVar("T")
U = TypeVar("U")

MAX_WAIT_SECS = 60.0  # the API's bound on a long-poll's `wait` (store/connection/notify.py)
PAGE = 1000  # a listing's page: the API's default
# A batch is sent once it holds this much JSON too: well under the server's MAX_BATCH_BYTES
# (16 MiB by default), so a deployment that lowered it still takes most batches whole.
BATCH_BYTES = 4 * 1024 * 1024
_encode = msgspec.json.encode


def _path(*parts: str) -> str:
    return "".join("/" + quote(part, safe="") for part in parts)


def _given(**params: str) -> dict[str, str]:
    return {name: value for name, value in params.items() if value}


def _decoded(kind: type[T]) -> Callable[[Reply], T]:
    """An answer's reader: the error it is (4xx, 5xx), else its JSON as `kind`."""
    decoder = msgspec.json.Decoder(kind)

    def read(reply: Reply) -> T:
        if reply.status >= 400:
            raise api_error(reply.status, reply.body, reply.headers)
        try:
            value: T = decoder.decode(reply.body)
        except msgspec.DecodeError as exc:
            raise SchedulerError(f"the scheduler's answer is not as expected: {exc}") from None
        return value

    return read


def _call(
    read: Callable[[Reply], T], method: str, path: str, repeatable: bool, **request: Any
) -> Flow[T]:
    reply = yield from send(Request(method, path, **request), repeatable)
    return read(reply)


_job = _decoded(Job)
_jobs = _decoded(list[Job])


# Jobs.


def submit(command: str = "", /, *, idempotency_key: str = "", **fields: Any) -> Flow[Job]:
    """Submit a job: `submit("make test", env_vars={"CI": "1"}, max_retries=2)`. The fields
    are POST /jobs' (docs/GUIDE.md). It is sent under an Idempotency-Key (a new one unless
    given), so a submit whose answer was lost is sent again and finds the job it made: never
    two jobs. A wrong field raises BadRequest naming it (`.field`)."""
    body = {"command": command, **fields} if command else fields
    key = idempotency_key or str(uuid.uuid4())
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    return (yield from _call(_job, "POST", "/jobs", True, json=_encode(body), headers=headers))


_entries = _decoded(dict[str, list[dict[str, Any]]])


def submit_many(
    jobs: Iterable[Mapping[str, Any]], /, *, idempotency_key: str = ""
) -> Flow[list[BatchEntry]]:
    """Submit many jobs (each a POST /jobs body) through POST /jobs/batch, up to 1000 a
    request: each job's entry, in order: `Made(job_id)`, or `Refused(error, status, field)`
    while the others are still made. One Idempotency-Key covers them all (each request its
    own part of it), so sending them again never makes one twice."""
    key = idempotency_key or str(uuid.uuid4())
    made: list[BatchEntry] = []
    for number, batch in enumerate(_batches(jobs)):
        headers = {"Idempotency-Key": f"{key}.{number}" if number else key}
        body = b'{"jobs":[' + b",".join(batch) + b"]}"
        answer = yield from _call(_entries, "POST", "/jobs/batch", True, json=body, headers=headers)
        made += [read_entry(entry) for entry in answer.get("jobs", [])]
    return made


def _batches(jobs: Iterable[Mapping[str, Any]]) -> Iterable[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for job in jobs:
        encoded = _encode(job)
        if batch and (len(batch) == MAX_JOBS or size + len(encoded) > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(encoded)
        size += len(encoded) + 1
    if batch:
        yield batch


def job(job_id: str, /) -> Flow[Job]:
    """The job (NotFound when there is none)."""
    return (yield from _call(_job, "GET", _path("jobs", job_id), True))


def jobs(
    *,
    status: str = "",
    node_id: str = "",
    schedule: str = "",
    newest: bool = False,
    after: str = "",
    before: str = "",
    page_size: int = PAGE,
) -> Feed[Job]:
    """Every job (or those with this status, on this node, made by this schedule), oldest
    first (`newest`: newest first), after job `after` (before `before`), read a page at a
    time as the iteration goes."""
    order = "newest" if newest or before else ""
    bound = before if order else after
    while True:
        params = _given(status=status, node_id=node_id, schedule=schedule, order=order)
        params["limit"] = str(page_size)
        if bound:
            params["before" if order else "after"] = bound
        page = yield from _call(_jobs, "GET", "/jobs", True, params=params)
        if not page:  # a page the API cut short (its byte budget) is not the last
            return
        for found in page:
            yield Item(found)
        bound = page[-1].job_id


def watch(
    job_id: str,
    /,
    *,
    until: Callable[[Job], bool] | None = None,
    timeout: float | None = None,
    poll_secs: float = MAX_WAIT_SECS,
) -> Feed[Job]:
    """The job each time its status changes, from now until `until(job)` says so (default:
    it ended, done or failed), the last job yielded being that one; WaitTimeout after
    `timeout` seconds. Each read after the first is a long-poll, answered as soon as the
    status changes, else after `poll_secs` (yielding the job again)."""
    done = until or _ended
    began: float = yield NOW
    status = ""
    while True:
        asked: float = yield NOW
        wait = min(poll_secs, MAX_WAIT_SECS)
        if timeout is not None:
            wait = max(0.0, min(wait, timeout - (asked - began)))
        found = yield from _read_job(job_id, status, wait if status else 0.0)
        yield Item(found)
        if done(found):
            return
        now: float = yield NOW
        if timeout is not None and now - began >= timeout:
            raise WaitTimeout(f"{job_id} is still {found.status} after {timeout:g} s", found)
        if found.status == status:
            # The wait ran out, or a scheduler without long-poll answered at once.
            yield Sleep(max(0.0, min(poll_secs, wait) - (now - asked)))
        status = found.status


def _ended(found: Job) -> bool:
    return found.status in FINAL_STATUSES


def _read_job(job_id: str, status_not: str, wait: float) -> Flow[Job]:
    params = {"wait": f"{wait:g}", "status_not": status_not} if wait else {}
    path = _path("jobs", job_id)
    return (yield from _call(_job, "GET", path, True, params=params, wait_secs=wait))


def wait(
    job_id: str,
    /,
    *,
    until: Callable[[Job], bool] | None = None,
    timeout: float | None = None,
    poll_secs: float = MAX_WAIT_SECS,
) -> Flow[Job]:
    """The job once `until(job)` says so (default: once it ended, done or failed);
    WaitTimeout (holding the last job seen) after `timeout` seconds. As `watch`, whose last
    job it is."""
    return (yield from _last(watch(job_id, until=until, timeout=timeout, poll_secs=poll_secs)))


def _last(feed: Feed[T]) -> Flow[T]:
    """A feed's last item, its other steps passed on as they are."""
    last: list[T] = []
    answer: Any = None
    failure: Exception | None = None
    while True:
        try:
            step = feed.throw(failure) if failure else feed.send(answer)
        except StopIteration:
            return last[0]
        answer, failure = None, None
        if isinstance(step, Item):
            last[:] = [step.value]
        else:
            answer, failure = yield from _passed_on(step)


def _passed_on(step: Step) -> Generator[Step, Any, tuple[Any, Exception | None]]:
    """A step of a plan inside another, passed on to the driver: (what came of it, or the
    failure the driver threw in: NotSent, Lost), for the inner plan, which decides whether
    to try again (a failure raised in the outer one would skip its retries)."""
    try:
        return (yield step), None
    except Exception as exc:
        return None, exc


def cancel(job_id: str, /) -> Flow[Job]:
    """Cancel the job: one not started ends at once (failed, `cancelled`); a running one is
    `cancelling` until its agent has stopped it. Conflict when it has ended. Not sent again
    once sent (Unreachable says so): look at the job before cancelling again."""
    return (yield from _call(_job, "DELETE", _path("jobs", job_id), False))


def retry(job_id: str, /) -> Flow[Job]:
    """Start a failed job over (pending again, under its id). Conflict when it has not
    failed. Not sent again once sent: look at the job before retrying again."""
    return (yield from _call(_job, "POST", _path("jobs", job_id, "retry"), False))


_retried = _decoded(RetryAnswer)


def retry_many(job_ids: Iterable[str], /) -> Flow[RetryAnswer]:
    """Start these failed jobs over, 1000 a request: which were `retried`, `not_found`,
    `not_failed`, `unplaced`, `blocked` (a job they run after failed)."""
    ids = list(dict.fromkeys(job_ids))
    total = RetryAnswer([], [], [], [], [])
    for start in range(0, len(ids), MAX_IDS):
        body = _encode({"job_ids": ids[start : start + MAX_IDS]})
        answer = yield from _call(_retried, "POST", "/jobs/retry", False, json=body)
        for name in msgspec.structs.asdict(answer):
            part = getattr(answer, name)
            if part is not msgspec.UNSET:
                setattr(total, name, [*_listed(getattr(total, name)), *part])
    return total


def _listed(value: list[str] | msgspec.UnsetType) -> list[str]:
    return [] if value is msgspec.UNSET else value


_attempts = _decoded(list[Attempt])


def attempts(job_id: str, /) -> Flow[list[Attempt]]:
    """The job's ended attempts, oldest first."""
    return (yield from _call(_attempts, "GET", _path("jobs", job_id, "attempts"), True))


# Output and events.


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
    params = _given(stream=stream, attempt=str(attempt or ""))
    return (yield from _call(_logs, "GET", _path("jobs", job_id, "logs"), True, params=params))


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
    params = {**_given(stream=stream, attempt=str(attempt or "")), "follow": "1"}
    request = Request("GET", _path("jobs", job_id, "logs"), params=params)
    yield from _mapped(sse.follow(request), _log_event, until=lambda item: isinstance(item, Ended))


def _log_event(event: Event) -> list[LogEvent]:
    read = _LOG_EVENTS.get(event.name)
    return [] if read is None else [_read_event(read, event)]  # else: a newer server's


def _mapped(
    feed: Feed[Event],
    each: Callable[[Event], list[U]],
    until: Callable[[U], bool] = lambda item: False,
) -> Feed[U]:
    """The items `each` makes of a feed's events, its other steps passed on; it ends after
    an item `until` says is the last."""
    answer: Any = None
    failure: Exception | None = None
    while True:
        try:
            step = feed.throw(failure) if failure else feed.send(answer)
        except StopIteration:
            return
        answer, failure = None, None
        if not isinstance(step, Item):
            answer, failure = yield from _passed_on(step)
            continue
        for value in each(step.value):
            yield Item(value)
            if until(value):
                feed.close()
                return


def _read_event(read: Callable[[str], T], event: Event) -> T:
    try:
        return read(event.data)
    except msgspec.DecodeError as exc:
        raise SchedulerError(f"the scheduler's {event.name} event is not readable: {exc}") from None


def events(
    *,
    job_id: str = "",
    node_id: str = "",
    status: str = "",
    schedule: str = "",
    after: str = "",
    since_start: bool = False,
    follow: bool = True,
) -> Feed[EventItem]:
    """Every job's status changes as they happen (or this job's, node's, status's,
    schedule's), from now, from the oldest kept (`since_start`), or after a `position` an
    earlier event carried; with `follow=False` those kept, then the iteration ends.
    Each is a `JobEvent`, or `EventsDropped` for changes trimmed before they were read."""
    params = _given(
        job_id=job_id,
        node_id=node_id,
        status=status,
        schedule=schedule,
        after="0" if since_start else after,
        follow="" if follow else "0",
    )
    feed = sse.follow(Request("GET", "/events", params=params), ends_at_eof=not follow)
    yield from _mapped(feed, _job_event)


_status_change = msgspec.json.Decoder(StatusChange).decode
_dropped = msgspec.json.Decoder(dict[str, int]).decode


def _job_event(event: Event) -> list[EventItem]:
    if event.name == "job":
        return [JobEvent(_read_event(_status_change, event), event.id)]
    if event.name == "dropped":
        dropped = _read_event(_dropped, event)
        return [EventsDropped(event.id, dropped.get("shard", 0), dropped.get("events", -1))]
    return []


# Nodes.

_nodes = _decoded(dict[str, Node])


def nodes(*, role: str = "") -> Flow[dict[str, Node]]:
    """The nodes by id (or those of this role: compute, storage)."""
    return (yield from _call(_nodes, "GET", "/nodes", True, params=_given(role=role)))


_drained = _decoded(NodeDrained)
_undrained = _decoded(NodeUndrained)
_DRAIN_HEADERS = {"Content-Type": "application/json"}


def drain(node_id: str, /) -> Flow[NodeDrained]:
    """No new job goes to the node; its queued jobs move to other nodes (`moved`), or wait
    for one that fits (`unplaced`). Draining twice is draining once."""
    path = _path("nodes", node_id, "drain")
    return (yield from _call(_drained, "POST", path, True, headers=_DRAIN_HEADERS))


def undrain(node_id: str, /) -> Flow[NodeUndrained]:
    """The node takes new jobs again (`undrained`: whether it was drained)."""
    path = _path("nodes", node_id, "undrain")
    return (yield from _call(_undrained, "POST", path, True, headers=_DRAIN_HEADERS))


# Schedules.

_schedule = _decoded(Schedule)
_schedules = _decoded(list[Schedule])


def add_schedule(
    name: str,
    /,
    job: Mapping[str, Any],
    *,
    cron: str = "",
    every_secs: int = 0,
    timezone: str = "",
    catchup: str = "",
    paused: bool = False,
) -> Flow[Schedule]:
    """A named schedule making `job` (a POST /jobs body) by `cron` (5 fields, in
    `timezone`) or `every_secs`; Conflict when the name is taken. Not sent again once sent."""
    body = {"name": name, "job": dict(job), "cron": cron, "every_secs": every_secs}
    body |= _given(timezone=timezone, catchup=catchup)
    body = {k: v for k, v in body.items() if v} | ({"paused": True} if paused else {})
    return (yield from _call(_schedule, "POST", "/schedules", False, json=_encode(body)))


def schedules(*, page_size: int = PAGE) -> Feed[Schedule]:
    """Every schedule, by name, read a page at a time as the iteration goes."""
    after = ""
    while True:
        params = {"limit": str(page_size), **_given(after=after)}
        page = yield from _call(_schedules, "GET", "/schedules", True, params=params)
        for found in page:
            yield Item(found)
        if len(page) < page_size:
            return
        after = page[-1].name


def schedule(name: str, /) -> Flow[Schedule]:
    """The schedule (NotFound when there is none)."""
    return (yield from _call(_schedule, "GET", _path("schedules", name), True))


def pause_schedule(name: str, /) -> Flow[Schedule]:
    """No tick of it fires until resumed."""
    return (yield from _call(_schedule, "POST", _path("schedules", name, "pause"), True))


def resume_schedule(name: str, /) -> Flow[Schedule]:
    """Active again, from now."""
    return (yield from _call(_schedule, "POST", _path("schedules", name, "resume"), True))


def _no_content(reply: Reply) -> None:
    if reply.status >= 400:
        raise api_error(reply.status, reply.body, reply.headers)


def delete_schedule(name: str, /) -> Flow[None]:
    """Delete it (its jobs stay). Not sent again once sent."""
    return (yield from _call(_no_content, "DELETE", _path("schedules", name), False))

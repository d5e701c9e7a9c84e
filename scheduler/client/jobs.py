"""The operations on jobs (submit, read, list, wait, cancel, retry), each a plan (steps.py)
that both clients carry out; ops.py lists them all."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from scheduler.client import calls
from scheduler.client.errors import Unreachable, WaitTimeout
from scheduler.client.models import BatchEntry, read_entry
from scheduler.client.steps import NOW, Feed, Flow, Item, Sleep
from scheduler.models.attempt import Attempt
from scheduler.models.batch import MAX_JOBS
from scheduler.models.job import FINAL_STATUSES, Job
from scheduler.models.queue_place import QueuePlace
from scheduler.models.retry import MAX_IDS, RetryAnswer

MAX_WAIT_SECS = 60.0  # the API's bound on a long-poll's `wait` (store/connection/notify.py)


# A batch is sent once it holds this much JSON too: well under the server's MAX_BATCH_BYTES
# (16 MiB by default), so a deployment that lowered it still takes most batches whole.
BATCH_BYTES = 4 * 1024 * 1024
CANCEL_LOOKS = 3  # a cancel's tries whose answer was lost, each after a look at the job


_job = calls.decoded(Job)


_jobs = calls.decoded(list[Job])


def submit(command: str = "", /, *, idempotency_key: str = "", **fields: Any) -> Flow[Job]:
    """Submit a job: `submit("make test", env_vars={"CI": "1"}, max_retries=2)`. The fields
    are POST /jobs' (docs/GUIDE.md). It is sent under an Idempotency-Key (a new one unless
    given), so a submit whose answer was lost is sent again and finds the job it made: never
    two jobs. A wrong field raises BadRequest naming it (`.field`)."""
    body = {"command": command, **fields} if command else fields
    key = idempotency_key or str(uuid.uuid4())
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    return (
        yield from calls.call(_job, "POST", "/jobs", True, json=calls.encode(body), headers=headers)
    )


_entries = calls.decoded(dict[str, list[dict[str, Any]]])


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
        headers = {"Idempotency-Key": part_key(key, number)}
        body = b'{"jobs":[' + b",".join(batch) + b"]}"
        answer = yield from calls.call(
            _entries, "POST", "/jobs/batch", True, json=body, headers=headers
        )
        made += [read_entry(entry) for entry in answer.get("jobs", [])]
    return made


def part_key(key: str, number: int) -> str:
    """The Idempotency-Key of the `number`th request (from 0) of a submit_many under `key`:
    its own part of it (the first's, the key itself)."""
    return f"{key}.{number}" if number else key


def _batches(jobs: Iterable[Mapping[str, Any]]) -> Iterable[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for job in jobs:
        encoded = calls.encode(job)
        if batch and (len(batch) == MAX_JOBS or size + len(encoded) > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(encoded)
        size += len(encoded) + 1
    if batch:
        yield batch


def job(job_id: str, /) -> Flow[Job]:
    """The job (NotFound when there is none)."""
    return (yield from calls.call(_job, "GET", calls.path("jobs", job_id), True))


def jobs(
    *,
    status: str = "",
    node_id: str = "",
    schedule: str = "",
    namespace: str = "",
    newest: bool = False,
    after: str = "",
    before: str = "",
    page_size: int = calls.PAGE,
) -> Feed[Job]:
    """Every job (or those with this status, on this node, made by this schedule, of this
    namespace), oldest first (`newest`: newest first), after job `after` (before `before`),
    read a page at a time as the iteration goes. A key limited to namespaces lists only
    theirs (another namespace: none); a namespace is listed without a node."""
    order = "newest" if newest or before else ""
    bound = before if order else after
    while True:
        params = calls.given(
            status=status, node_id=node_id, schedule=schedule, namespace=namespace, order=order
        )
        params["limit"] = str(page_size)
        if bound:
            params["before" if order else "after"] = bound
        page = yield from calls.call(_jobs, "GET", "/jobs", True, params=params)
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
    path = calls.path("jobs", job_id)
    return (yield from calls.call(_job, "GET", path, True, params=params, wait_secs=wait))


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
    return (yield from calls.last(watch(job_id, until=until, timeout=timeout, poll_secs=poll_secs)))


def cancel(job_id: str, /) -> Flow[Job]:
    """Cancel the job: one not started ends at once (failed, `cancelled`); a running one is
    `cancelling` until its agent has stopped it. Conflict when it has ended. A cancel whose
    answer was lost looks at the job before it is sent again: cancelled or cancelling, it
    was done (the job is the answer); else it is sent again."""
    path = calls.path("jobs", job_id)
    for look in range(CANCEL_LOOKS):
        try:
            return (yield from calls.call(_job, "DELETE", path, False))
        except Unreachable as lost:
            if not lost.maybe_done or look == CANCEL_LOOKS - 1:
                raise
        seen = yield from job(job_id)
        if seen.status == "cancelling" or seen.failure_reason == "cancelled":
            return seen
    raise AssertionError("unreachable: the last look raises or returns")


def retry(job_id: str, /) -> Flow[Job]:
    """Start a failed job over (pending again, under its id). Conflict when it has not
    failed. Not sent again once sent: look at the job before retrying again."""
    return (yield from calls.call(_job, "POST", calls.path("jobs", job_id, "retry"), False))


_retried = calls.decoded(RetryAnswer)


def retry_many(job_ids: Iterable[str], /) -> Flow[RetryAnswer]:
    """Start these failed jobs over, 1000 a request: which were `retried`, `not_found`,
    `not_failed`, `unplaced`, `blocked` (a job they run after failed: `blocked_by` names
    it, by the blocked job's id)."""
    ids = list(dict.fromkeys(job_ids))
    total = RetryAnswer([], [], [], [], [])
    for start in range(0, len(ids), MAX_IDS):
        body = calls.encode({"job_ids": ids[start : start + MAX_IDS]})
        answer = yield from calls.call(_retried, "POST", "/jobs/retry", False, json=body)
        for name in msgspec.structs.asdict(answer):
            part = getattr(answer, name)
            if isinstance(part, dict):  # blocked_by, the one dict
                total.blocked_by = {**(total.blocked_by or {}), **part}
            elif part is not msgspec.UNSET:
                setattr(total, name, [*_listed(getattr(total, name)), *part])
    return total


def _listed(value: list[str] | msgspec.UnsetType) -> list[str]:
    return [] if value is msgspec.UNSET else value


_attempts = calls.decoded(list[Attempt])


def attempts(job_id: str, /) -> Flow[list[Attempt]]:
    """The job's ended attempts, oldest first."""
    return (yield from calls.call(_attempts, "GET", calls.path("jobs", job_id, "attempts"), True))


_place = calls.decoded(QueuePlace)


def place(job_id: str, /) -> Flow[QueuePlace]:
    """A pending job's place in the queue it waits in: `ahead` of `queued` (both None in
    none: not pending)."""
    return (yield from calls.call(_place, "GET", calls.path("jobs", job_id, "place"), True))

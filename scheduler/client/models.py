"""What the client's calls answer that is not one of the scheduler's own models (a `Job`,
`Attempt`, `Node`, `ScheduleView`, a job event: scheduler/models), which it answers as they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.models.batch import Made, Refused
from scheduler.models.event import Event
from scheduler.models.log import Dropped, Ended, Output, Status
from scheduler.models.schedule import ScheduleView

Schedule = ScheduleView
BatchEntry = Made | Refused  # a bulk submit's answer for one job
LogEvent = Output | Status | Ended | Dropped  # what following a job's output reads


def read_entry(entry: dict[str, Any]) -> BatchEntry:
    """A bulk submit's entry: the job made, or why not."""
    if "job_id" in entry:
        return Made(str(entry["job_id"]))
    return Refused(str(entry.get("error", "")), int(entry.get("status", 0)), entry.get("field", ""))


@dataclass(frozen=True, slots=True)
class Logs:
    """A job's output so far: `text`, the `attempt` it is of, the bytes `dropped` from its
    start (trimmed past LOG_MAX_BYTES before anyone read them)."""

    text: str
    attempt: int
    dropped: int


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A job's status change, and its `position`: what `events(after=...)` resumes after."""

    change: Event
    position: str


@dataclass(frozen=True, slots=True)
class EventsDropped:
    """Events trimmed before they were read (EVENTS_RETAIN_SECS): `count` of them on the
    shard, -1 when not known (the event resumed after is gone too)."""

    position: str
    shard: int
    count: int


EventItem = JobEvent | EventsDropped

"""Watching jobs: a running job's live output (appended by its agent, read and followed by
GET /jobs/{id}/logs) and the job events (GET /events), each shard's stream of them
(keys.py `job_log`, `events`; docs/GUIDE.md, Watching jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.store.operation import Shard, Steps, by_job, each, home, operation, run, send
from scheduler.store.scripts import logs
from scheduler.store.scripts.logs import LogPage


@operation(by_job)
def append_output(
    shard: Shard, job_id: str, caller: str, node_id: str, stream: str, offset: int, data: str
) -> Steps[int]:
    """A chunk of the running job's `stream` held (at `offset`); the stream's next offset."""
    cap, ttl = shard.settings.log_max_bytes, shard.settings.log_retain_secs
    append = logs.append_output(job_id, caller, node_id, stream, offset, data, cap, ttl)
    return (yield from run(append))


@operation(by_job)
def read_log(
    shard: Shard, job_id: str, after: str, budget: int, namespaces: str = ""
) -> Steps[LogPage]:
    """The job's live output after position `after` ("": from its start), and its state;
    JobNotFound for a job outside `namespaces` too (models/namespace.py scope)."""
    return (yield from run(logs.read_log(job_id, after, budget, namespaces)))


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One entry of a shard's event stream: its shard, id (the position) and fields."""

    shard: int
    position: str
    fields: dict[str, str]


def _concat(parts: list[list[RawEvent]]) -> list[RawEvent]:
    return [event for part in parts for event in part]


@operation(each(_concat))
def events_after(shard: Shard, positions: tuple[str, ...], count: int) -> Steps[list[RawEvent]]:
    """Each shard's events after its position in `positions` ("": its oldest kept, "$": its
    newest alone, "=<id>": from that one on), at most `count` per shard, oldest first."""
    after = positions[shard.index] if shard.index < len(positions) else ""
    if after == "$":
        raw: list[Any] = yield from send("XREVRANGE", shard.keys.events, "+", "-", "COUNT", 1)
    else:
        start = after[1:] if after.startswith("=") else f"({after}" if after else "-"
        raw = yield from send("XRANGE", shard.keys.events, start, "+", "COUNT", count)
    return [RawEvent(shard.index, str(position, "ascii"), _fields(flat)) for position, flat in raw]


def _fields(flat: list[bytes]) -> dict[str, str]:
    return {str(flat[i], "utf-8"): str(flat[i + 1], "utf-8") for i in range(0, len(flat), 2)}


@operation(home)
def trim_events(shard: Shard, now: float) -> Steps[int]:
    """The events older than EVENTS_RETAIN_SECS removed (whole stream nodes: XTRIM's `~`);
    how many went."""
    cutoff_ms = int((now - shard.settings.events_retain_secs) * 1000)
    removed: int = yield from send("XTRIM", shard.keys.events, "MINID", "~", cutoff_ms)
    return removed

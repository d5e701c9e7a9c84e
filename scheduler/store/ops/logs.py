"""Watching jobs: a running job's live output (appended by its agent, read and followed by
GET /jobs/{id}/logs) and the job events (GET /events), each shard's stream of them
(keys.py `job_log`, `events`; docs/GUIDE.md, Watching jobs)."""

from __future__ import annotations

from dataclasses import dataclass

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
def read_log(shard: Shard, job_id: str, after: str, budget: int) -> Steps[LogPage]:
    """The job's live output after position `after` ("": from its start), and its state."""
    return (yield from run(logs.read_log(job_id, after, budget)))


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One entry of a shard's event stream: its shard, id (the position) and fields."""

    shard: int
    position: str
    fields: dict[str, str]


@dataclass(frozen=True, slots=True)
class ShardEvents:
    """A shard's events read, with its stream's counts then (scripts/logs.py EventsRead)."""

    shard: int
    trimmed: int
    added: int
    events: list[RawEvent]


def _concat(parts: list[list[ShardEvents]]) -> list[ShardEvents]:
    return [read for part in parts for read in part]


@operation(each(_concat))
def events_after(shard: Shard, positions: tuple[str, ...], count: int) -> Steps[list[ShardEvents]]:
    """Each shard's events after its position in `positions` ("": its oldest kept, "$": its
    newest alone, "=<id>": from that one on), at most `count` per shard, oldest first; with
    its stream's counts (READ_EVENTS)."""
    after = positions[shard.index] if shard.index < len(positions) else ""
    if after == "$":
        start = "+"
    else:
        start = after[1:] if after.startswith("=") else f"({after}" if after else "-"
    read = yield from run(logs.read_events(start, count))
    events = [RawEvent(shard.index, position, fields) for position, fields in read.entries]
    return [ShardEvents(shard.index, read.trimmed, read.added, events)]


@operation(home)
def trim_events(shard: Shard, now: float) -> Steps[int]:
    """The events older than EVENTS_RETAIN_SECS removed (whole stream nodes: XTRIM's `~`);
    how many went."""
    cutoff_ms = int((now - shard.settings.events_retain_secs) * 1000)
    removed: int = yield from send("XTRIM", shard.keys.events, "MINID", "~", cutoff_ms)
    return removed

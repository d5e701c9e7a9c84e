"""A job event, as GET /events streams it (docs/GUIDE.md, Watching jobs): one per change of a
job's status (or of its node), written in the script that makes the change (store/scripts/lua/
includes/events.lua `move_job`), so an event exists if and only if the change does.

`number` is the job's own: its first event (made) is 1, each change one more (its count is
kept in its record's head: models/record.py EVENT_COUNT). An ending's SNS outbox entry is
named by its job and number ("<job id>:<number>"), so a consumer of both sees one naming,
exactly one event per ending. Redis keeps the last EVENTS_KEPT per shard, and none older than
EVENTS_RETAIN_SECS.
"""

from __future__ import annotations

import msgspec

EVENTS_KEPT = 100_000


class Event(msgspec.Struct, omit_defaults=True, kw_only=True):
    """`old_status` is "" for a job just made; `status` is where it went, `node_id` the
    node it is on then ("" while it has none); `failure_reason` as the job's own."""

    number: int
    job_id: str
    status: str
    at: str
    old_status: str = ""
    node_id: str = ""
    old_node_id: str = ""
    schedule: str = ""
    failure_reason: str = ""


def event_of(fields: dict[str, str], at: str) -> Event:
    """The event of a stream entry's fields (events.lua note_event, which leaves out what says
    nothing: `from` for a job just made, `was` when it is `node`, empty ones), made at `at`."""
    node, old_status = fields.get("node", ""), fields.get("from", "")
    return Event(
        number=int(fields["n"]),
        job_id=fields["job"],
        status=fields["to"],
        at=at,
        old_status=old_status,
        node_id=node,
        old_node_id=fields.get("was", node if old_status else ""),
        schedule=fields.get("schedule", ""),
        failure_reason=fields.get("reason", ""),
    )

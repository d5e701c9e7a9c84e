"""A job event, as GET /events streams it (docs/GUIDE.md, Watching jobs): one per change of a
job's status (or of its node), written in the script that makes the change (store/scripts/lua/
includes/events.lua `move_job`), so an event exists if and only if the change does.

`number` is the shard's event number (`{P}:seq:event`): an ending's is the number of its SNS
outbox entry, so a consumer of both sees one numbering, exactly one event per ending. Redis
keeps about the last EVENTS_KEPT per shard (trimmed every EVENTS_TRIM_EVERY events), and none
older than EVENTS_RETAIN_SECS.
"""

from __future__ import annotations

import msgspec

EVENTS_KEPT = 100_000
# How often the scripts trim the stream to EVENTS_KEPT (every this many events: events.lua).
EVENTS_TRIM_EVERY = 100


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
    namespace: str = ""  # the job's, as its record says it ("": the default's, omitted)

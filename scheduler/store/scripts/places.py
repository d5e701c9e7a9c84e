"""Where a job sits in Redis, declared once: for each status, the indexes a job is in on a
node and on none, scored how, and whether it holds its asks on its node (`PLACES`). The Lua
that puts a job in its place, takes it out and moves it from one place to another is
generated from it (place_lua.py `PLACES_LUA`, an include file of the scripts' library):
create, every transition, placement, retention and the restore call it, and no other code
writes these indexes (docs/ARCHITECTURE.md, "Redis keys"). A new status is a row here plus
its transitions.

The generated functions, each for a job `id` of number `n`, decoded as `job` (or a table of
the fields they read: status, node_id, priority, job_type, schedule, namespace, cpus,
memory_mb):
- `move_place(id, n, job, new, to, at)`: from its place (job.status, job.node_id) to status
  `new` on node `to` ("": none), touching only the indexes that differ; `at` scores an
  index the new place enters by time (when due, started, asked to stop, finished). Sets
  job.status and job.node_id.
- `enter_place(id, n, job, at, write)`: into every index of its place, each write a
  `write(command, key, score?, id)` call (redis.call, or the restore's batching).
- `leave_place(id, job)`: out of every index of its place.
- `leave_fixed(id)`: out of every index whose key names no status, node or schedule, whatever
  the place (the restore's sweep of what a record it replaces may have left behind).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from scheduler.models.job import ENDINGS, QUOTA_REASONS, RETIRED_STATUSES, STATUSES


class Score(Enum):
    """How an index scores a job."""

    NUMBER = "number"  # its number N: listing order
    QUEUE = "queue"  # a node's queue (and the unplaced jobs'): queue_score, below
    AT = "at"  # when it entered the status: the caller's `at`
    MEMBER = "member"  # a set: no score
    COUNT = "count"  # a hash of counts, written by its own code (endings.py wait_for): left only


# The Lua of each score, of the job's number `n`, `job` and the time `at`.
_SCORE_LUA = {Score.NUMBER: "n", Score.QUEUE: "queue_score(n, job.priority)", Score.AT: "at"}


class Only(Enum):
    """Which jobs of a place an index holds (the Lua condition on the job)."""

    ANY = ""
    RUN = 'job.job_type ~= "service"'  # run-jobs: a service neither times out nor takes a slot
    SCHEDULED = 'type(job.schedule) == "string" and job.schedule ~= ""'
    # A pending job on no node waits for placement, or for its namespace's quota (admit.lua
    # wait_quota: its pending_reason says so, quota or exceeds_quota, set before the move and
    # cleared after it).
    PLACEABLE = " and ".join(f'job.pending_reason ~= "{r}"' for r in QUOTA_REASONS)
    OVER_QUOTA = "(" + " or ".join(f'job.pending_reason == "{r}"' for r in QUOTA_REASONS) + ")"


@dataclass(frozen=True, slots=True)
class Index:
    """An index of jobs: the `Keys` member `key` (a script's K.<key>), with its arguments
    among the job's "status", "node", "schedule" and "namespace"; how it scores a job; which
    jobs it holds."""

    key: str
    args: tuple[str, ...]
    score: Score
    only: Only = Only.ANY

    def scored(self, score: Score) -> Index:
        return Index(self.key, self.args, score, self.only)


ALL_JOBS = Index("all_jobs", (), Score.NUMBER)
BY_STATUS = Index("status", ("status",), Score.NUMBER)
BY_SCHEDULE = Index("schedule_jobs", ("schedule",), Score.NUMBER, Only.SCHEDULED)
BY_NAMESPACE = Index("namespace_jobs", ("namespace",), Score.NUMBER)
NAMESPACE_STATUS = Index("namespace_status", ("namespace", "status"), Score.NUMBER)
NODE_JOBS = Index("node_jobs", ("node",), Score.NUMBER)
NODE_STATUS = Index("node_status", ("node", "status"), Score.NUMBER)
UNPLACED = Index("unplaced", (), Score.QUEUE, Only.PLACEABLE)
OVER_QUOTA = Index("over_quota", ("namespace",), Score.QUEUE, Only.OVER_QUOTA)
DELAYED = Index("delayed", (), Score.AT)  # by due time: PROMOTE_DUE reads the due ones
WAITING = Index("waiting", (), Score.COUNT)  # how many of its `after` are not done
BUSY = Index("node_busy", ("node",), Score.MEMBER, Only.RUN)  # MAX_JOBS_PER_NODE's slots
DEADLINES = Index("deadlines", (), Score.AT, Only.RUN)  # by start: the timeout sweep
CANCELLING = Index("cancelling", (), Score.AT)  # by when asked: CANCEL_GRACE_SECS' sweep
FINISHED = Index("finished", (), Score.AT)  # by finish time: retention

# In every place: every job, by status, by the schedule that made it, by namespace, and by
# namespace and status.
EVERYWHERE = (ALL_JOBS, BY_STATUS, BY_SCHEDULE, BY_NAMESPACE, NAMESPACE_STATUS)


@dataclass(frozen=True, slots=True)
class Place:
    """A status's row: the indexes of a job in it on a node, and on none (a job placement
    has not bound yet, or that ended unbound); whether it holds its asks on its node
    (room.lua hold: its room, its load); whether it counts against its namespace's quota of
    running jobs, cpus and memory (`runs`: quota.lua ns_use, ns_release)."""

    on_node: tuple[Index, ...]
    on_none: tuple[Index, ...]
    holds: bool = False
    runs: bool = False


def _row(
    node: tuple[Index, ...], none: tuple[Index, ...] = (), holds: bool = False, runs: bool = False
) -> Place:
    return Place((*EVERYWHERE, NODE_JOBS, *node), (*EVERYWHERE, *none), holds, runs)


_ENDED = _row((NODE_STATUS, FINISHED), (FINISHED,))

# The table. A running or cancelling job is always on a node (claimed by its agent).
PLACES: dict[str, Place] = {
    "pending": _row((NODE_STATUS.scored(Score.QUEUE),), (UNPLACED, OVER_QUOTA), holds=True),
    "delayed": _row((NODE_STATUS, DELAYED), (DELAYED,)),
    "waiting": _row((NODE_STATUS, WAITING), (WAITING,)),
    "running": _row((NODE_STATUS, BUSY, DEADLINES), holds=True, runs=True),
    "cancelling": _row((NODE_STATUS, BUSY, CANCELLING), holds=True, runs=True),
    "done": _ENDED,
    "failed": _ENDED,
}
if set(PLACES) != set(STATUSES):
    raise TypeError("store/scripts/places.py PLACES needs a row per status of models.job.STATUSES")
# A status an earlier version stored sits where the status it is now does (snapshot.py
# UPGRADE_RETIRED moves it there).
ROWS: dict[str, Place] = {
    **PLACES,
    **{old: PLACES[ENDINGS[ending][0]] for old, ending in RETIRED_STATUSES.items()},
}


def row_of(status: str) -> Place:
    return ROWS[status]


def indexes(status: str, placed: bool) -> tuple[Index, ...]:
    """The indexes of a job in `status`, on a node or on none."""
    row = ROWS[status]
    return row.on_node if placed else row.on_none

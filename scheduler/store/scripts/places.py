"""Where a job sits in Redis, declared once: for each status, the indexes a job is in on a
node and on none, scored how, and whether it holds its asks on its node (`PLACES`). The Lua
that puts a job in its place, takes it out and moves it from one place to another is
generated from it (`PLACES_LUA`, an include file of the scripts' library: library.py): create, every
transition, placement, retention and the restore call it, and no other code writes these
indexes (docs/ARCHITECTURE.md, "Redis keys"). A new status is a row here plus its transitions.

The generated functions, each for a job `id` of number `n`, decoded as `job` (or a table of
the fields they read: status, node_id, priority, job_type, schedule, cpus, memory_mb):
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

from scheduler.models.job import ENDINGS, RETIRED_STATUSES, STATUSES


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


@dataclass(frozen=True, slots=True)
class Index:
    """An index of jobs: the `Keys` member `key` (a script's K.<key>), with its arguments
    among the job's "status", "node" and "schedule"; how it scores a job; which jobs it holds."""

    key: str
    args: tuple[str, ...]
    score: Score
    only: Only = Only.ANY

    def scored(self, score: Score) -> Index:
        return Index(self.key, self.args, score, self.only)


ALL_JOBS = Index("all_jobs", (), Score.NUMBER)
BY_STATUS = Index("status", ("status",), Score.NUMBER)
BY_SCHEDULE = Index("schedule_jobs", ("schedule",), Score.NUMBER, Only.SCHEDULED)
NODE_JOBS = Index("node_jobs", ("node",), Score.NUMBER)
NODE_STATUS = Index("node_status", ("node", "status"), Score.NUMBER)
UNPLACED = Index("unplaced", (), Score.QUEUE)
DELAYED = Index("delayed", (), Score.AT)  # by due time: PROMOTE_DUE reads the due ones
WAITING = Index("waiting", (), Score.COUNT)  # how many of its `after` are not done
BUSY = Index("node_busy", ("node",), Score.MEMBER, Only.RUN)  # MAX_JOBS_PER_NODE's slots
DEADLINES = Index("deadlines", (), Score.AT, Only.RUN)  # by start: the timeout sweep
CANCELLING = Index("cancelling", (), Score.AT)  # by when asked: CANCEL_GRACE_SECS' sweep
FINISHED = Index("finished", (), Score.AT)  # by finish time: retention

# In every place: every job, by status, by the schedule that made it.
EVERYWHERE = (ALL_JOBS, BY_STATUS, BY_SCHEDULE)


@dataclass(frozen=True, slots=True)
class Place:
    """A status's row: the indexes of a job in it on a node, and on none (a job placement
    has not bound yet, or that ended unbound); whether it holds its asks on its node
    (room.py hold: its room, its load)."""

    on_node: tuple[Index, ...]
    on_none: tuple[Index, ...]
    holds: bool = False


def _row(node: tuple[Index, ...], none: tuple[Index, ...] = (), holds: bool = False) -> Place:
    return Place((*EVERYWHERE, NODE_JOBS, *node), (*EVERYWHERE, *none), holds)


_ENDED = _row((NODE_STATUS, FINISHED), (FINISHED,))

# The table. A running or cancelling job is always on a node (claimed by its agent).
PLACES: dict[str, Place] = {
    "pending": _row((NODE_STATUS.scored(Score.QUEUE),), (UNPLACED,), holds=True),
    "delayed": _row((NODE_STATUS, DELAYED), (DELAYED,)),
    "waiting": _row((NODE_STATUS, WAITING), (WAITING,)),
    "running": _row((NODE_STATUS, BUSY, DEADLINES), holds=True),
    "cancelling": _row((NODE_STATUS, BUSY, CANCELLING), holds=True),
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


# The indexes by key: one key's entries share a command, differing only in score.
def _groups() -> dict[tuple[str, tuple[str, ...]], list[Index]]:
    groups: dict[tuple[str, tuple[str, ...]], list[Index]] = {}
    for row in ROWS.values():
        for index in (*row.on_node, *row.on_none):
            found = groups.setdefault((index.key, index.args), [])
            if index not in found:
                found.append(index)
    return groups


def _key(index: Index, status: str, node: str) -> str:
    values = {"status": status, "node": node, "schedule": "job.schedule"}
    if not index.args:
        return f"K.{index.key}"
    return f"K.{index.key}({', '.join(values[arg] for arg in index.args)})"


def _among(var: str, statuses: list[str]) -> str:
    if statuses == list(ROWS):
        return "true"
    tests = [f'{var} == "{s}"' for s in statuses]
    return tests[0] if len(tests) == 1 else "(" + " or ".join(tests) + ")"


def _member(entries: list[Index], status: str, node: str) -> str:
    """The Lua condition: a job in place (`status`, `node`) is in the index of `entries`."""
    on_node = [s for s, row in ROWS.items() if set(entries) & set(row.on_node)]
    on_none = [s for s, row in ROWS.items() if set(entries) & set(row.on_none)]
    if on_node == on_none:
        where = _among(status, on_node)
    else:
        parts = [
            f'{node} {test} "" and {_among(status, statuses)}'
            for test, statuses in (("~=", on_node), ("==", on_none))
            if statuses
        ]
        parts = [part.removesuffix(" and true") for part in parts]
        where = parts[0] if len(parts) == 1 else "(" + " or ".join(f"({p})" for p in parts) + ")"
    only = entries[0].only.value
    if not only:
        return where
    return only if where == "true" else f"{only} and {where}"


def _moves(entries: list[Index]) -> bool:
    """Whether a job's entry in the index of `entries` may change when it changes place: its
    key names its status or node, or not every place is in it."""
    keyed = {"status", "node"} & set(entries[0].args)
    return bool(keyed) or _member(entries, "s", "v") != (entries[0].only.value or "true")


def _score(entries: list[Index], status: str) -> str:
    """The Lua of the score a job in `status` has in the index of `entries`: one score, or
    one for some statuses (a node's queue) and N for the others."""
    if len(entries) == 1:
        return _SCORE_LUA[entries[0].score]
    (special,) = [index for index in entries if index.score is not Score.NUMBER]
    statuses = [s for s, row in ROWS.items() if special in row.on_node or special in row.on_none]
    return f"({_among(status, statuses)} and {_SCORE_LUA[special.score]} or n)"


def _add(entries: list[Index], status: str, node: str, call: str) -> str:
    index = entries[0]
    key = _key(index, status, node)
    if index.score is Score.COUNT:
        return ""  # written by its own code (the count): entered there
    if index.score is Score.MEMBER:
        return f'{call}("SADD", {key}, id)'
    return f'{call}("ZADD", {key}, {_score(entries, status)}, id)'


def _remove(entries: list[Index], status: str, node: str) -> str:
    key = _key(entries[0], status, node)
    command = {Score.MEMBER: "SREM", Score.COUNT: "HDEL"}.get(entries[0].score, "ZREM")
    return f'redis.call("{command}", {key}, id)'


def _move_place() -> str:
    lines = [
        "local function move_place(id, n, job, new, to, at)",
        "  local old, from = job.status, job.node_id",
        '  local held, holds = HOLDS[old] and from ~= "", HOLDS[new] and to ~= ""',
        "  if held and not (holds and to == from) then unhold(from, id, job) end",
    ]
    for entries in _groups().values():
        if _moves(entries):
            lines += _transfer(entries)
    lines += [
        "  job.status, job.node_id = new, to",
        "  if holds and not (held and to == from) then hold(to, id, job) end",
        "end",
    ]
    return "\n".join(lines)


def _transfer(entries: list[Index]) -> list[str]:
    """move_place's Lua for one index: out of the old place's entry and into the new one's,
    unless the two are the same entry (the same key: an entry by time keeps its time)."""
    was, now = _member(entries, "old", "from"), _member(entries, "new", "to")
    same = [f"{a} == {b}" for arg, a, b in _PLACE_ARGS if arg in entries[0].args]
    remove, add = _remove(entries, "old", "from"), _add(entries, "new", "to", "redis.call")
    if was == now == "true":
        body = [f"    {remove}"] + ([f"    {add}"] if add else [])
        return [f"  if not ({' and '.join(same)}) then", *body, "  end"]
    kept = " and ".join(["was", "is", *same])
    lines = ["  do", f"    local was, is = {was}, {now}", f"    local kept = {kept}"]
    lines.append(f"    if was and not kept then {remove} end")
    if add:
        lines.append(f"    if is and not kept then {add} end")
    return [*lines, "  end"]


# The place's parts an index key may name, as move_place's old and new place call them.
_PLACE_ARGS = (("status", "old", "new"), ("node", "from", "to"))


def _enter() -> str:
    lines = [
        "local function enter_place(id, n, job, at, write)",
        "  local status, node = job.status, job.node_id",
    ]
    for entries in _groups().values():
        add = _add(entries, "status", "node", "write")
        if add:
            lines.append(_when(_member(entries, "status", "node"), add))
    lines += ['  if HOLDS[status] and node ~= "" then hold(node, id, job) end', "end"]
    return "\n".join(lines)


def _leave() -> str:
    lines = [
        "local function leave_place(id, job)",
        "  local status, node = job.status, job.node_id",
        '  if HOLDS[status] and node ~= "" then unhold(node, id, job) end',
    ]
    for entries in _groups().values():
        member = _member(entries, "status", "node")
        lines.append(_when(member, _remove(entries, "status", "node")))
    lines.append("end")
    return "\n".join(lines)


def _when(condition: str, statement: str) -> str:
    return f"  {statement}" if condition == "true" else f"  if {condition} then {statement} end"


def _leave_fixed() -> str:
    removals = [
        f"  {_remove(entries, '', '')}" for (_, args), entries in _groups().items() if not args
    ]
    return "\n".join(["local function leave_fixed(id)", *removals, "end"])


_HOLDS = ", ".join(f"{status} = true" for status, row in ROWS.items() if row.holds)

# An include file of the library (library.py FILES), written here: its include lines first.
PLACES_LUA = f"""--- @include "keys"
--- @include "hold"
--- @include "unhold"

-- Job number n's score in a node's queue (its pending index, which POLL reads from the
-- lowest) and among the unplaced jobs: higher priority first, by number within one. Exact
-- as a double for |priority| <= 1000 (models.MAX_PRIORITY) and n < 2^42; priority 0 (nil:
-- none) scores n itself, the original's FIFO.
local function queue_score(n, priority)
  return n - (tonumber(priority) or 0) * 4398046511104
end

-- The statuses in which a job holds what it asks on its node (places.py PLACES).
local HOLDS = {{{_HOLDS}}}

-- A job from its place to status `new` on node `to` (places.py PLACES, generated).
{_move_place()}

-- A job into every index of its place (places.py PLACES, generated).
{_enter()}

-- A job out of every index of its place (places.py PLACES, generated).
{_leave()}

-- A job out of every index keyed by nothing of its place (places.py PLACES, generated).
{_leave_fixed()}
"""

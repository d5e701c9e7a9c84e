"""The scripts of the SQLite snapshot (scheduler/snapshot/): the dirty set a snapshot takes,
and the restore. Each with its call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.models.record import split
from scheduler.models.wire import rfc3339
from scheduler.store.scripts.endings import SETTLE_UNITS
from scheduler.store.scripts.script import Call, Script

TAKE_DIRTY = Script(
    "TAKE_DIRTY",
    "",
    """
-- Start a snapshot: move the jobs changed since the last one into the in-flight set, which
-- keeps them until the snapshot writing them has committed. A set left by a crashed snapshot
-- is folded in, so its changes are written by this one. Returns the number in flight.
if redis.call("EXISTS", K.dirty) == 1 then
  if redis.call("EXISTS", K.dirty_inflight) == 1 then
    redis.call("SUNIONSTORE", K.dirty_inflight, K.dirty_inflight, K.dirty)
    redis.call("DEL", K.dirty)
  else
    redis.call("RENAME", K.dirty, K.dirty_inflight)
  end
end
return redis.call("SCARD", K.dirty_inflight)
""",
    int,
)


def take_dirty() -> Call[int]:
    return TAKE_DIRTY.call()


@dataclass(frozen=True, slots=True)
class RestoredJob:
    """A job to put back: its record (whole: the restore puts it in parts, models/record.py)
    and what its indexes need. `started` (epoch s) is set for a running run-job only: those
    are the ones in the busy set and the deadlines.
    `finished` (epoch s) is set for a finished job only (done or failed: the retention
    index). `due` (epoch s) for a delayed job only (the delayed index)."""

    job_id: str
    score: float
    node_id: str
    status: str
    started: float | None
    finished: float | None
    record: bytes
    due: float | None = None
    priority: int = 0  # the record's: its place in its node's queue while pending
    cpus: int = 0  # the record's asks, held on its node while bound there (place.py hold)
    memory_mb: int = 0
    schedule: str = ""  # the schedule that made it: its index (keys.py schedule_jobs)
    job_type: str = ""  # the record's: a run-job holds a slot while running or cancelling


RESTORE_JOBS = Script(
    "RESTORE_JOBS",
    "mark_dirty *jobs",
    """
-- Put jobs back as the snapshot holds them, each in every index of its place (places.py
-- enter_place, as the scripts keep them). A job already present is first taken out of its
-- old place. mark_dirty "1": the next snapshot writes them. jobs: 14 values each, at most
-- 1000 jobs: id, score, node id, status, the time it entered its status where its place
-- is scored by it (a delayed job's due time, a running run-job's start, a finished job's
-- finish, 0 for a cancelling one: asked long ago, the next sweep ends it) or "", its
-- job_type, priority (a pending job's place in its node's queue), cpus and memory_mb (what
-- it holds on its node: room.py hold), then its record's parts (models/record.py): head,
-- spec, stdout, stderr ("": none), then the schedule that made it ("": none). A pending job
-- on no node is unplaced again, and the next placement pass is flagged. Each index gets one
-- ZADD/SADD for the whole batch: far cheaper than one call per job. Returns the number of
-- jobs restored.
local function unindex(id, raw)
  local ok, old = pcall(cjson.decode, raw)
  if ok and type(old) == "table" and type(old.node_id) == "string"
    and type(old.status) == "string" then
    leave_place(id, old)
  end
  leave_fixed(id)  -- whatever the old record says (or cannot say)
end
local groups = {}
-- enter_place's writes, gathered by key: {command, values...} each.
local function gather(command, key, a, b)
  local list = groups[key]
  if not list then list = {command}; groups[key] = list end
  list[#list + 1] = a
  if b then list[#list + 1] = b end
end
-- MSET or DEL of `values`, in calls small enough for Lua's unpack().
local function in_chunks(command, values, step)
  for i = 1, #values, step do
    redis.call(command, unpack(values, i, math.min(i + step - 1, #values)))
  end
end
local WIDTH = 14
local restored, job_keys = {}, {}
for i = 1, #jobs, WIDTH do
  restored[#restored + 1] = jobs[i]
  job_keys[#job_keys + 1] = K.job(jobs[i])
end
if #restored == 0 then return 0 end
for i, old in ipairs(redis.call("MGET", unpack(job_keys))) do
  if old then unindex(restored[i], old) end
end
local records, absent = {}, {}
for j, id in ipairs(restored) do
  local i = 1 + (j - 1) * WIDTH
  local keys = {}
  part_keys(id, keys)
  for k, key in ipairs(keys) do
    local value = jobs[i + 8 + k]
    if value ~= "" then
      records[#records + 1], records[#records + 2] = key, value
    else
      absent[#absent + 1] = key  -- an older record of the id may have had it
    end
  end
  local where = {node_id = jobs[i + 2], status = jobs[i + 3], job_type = jobs[i + 5],
    priority = jobs[i + 6], cpus = jobs[i + 7], memory_mb = jobs[i + 8], schedule = jobs[i + 13]}
  enter_place(id, jobs[i + 1], where, jobs[i + 4], gather)
  if mark_dirty == "1" then gather("SADD", K.dirty, id) end
end
in_chunks("DEL", absent, 1000)
in_chunks("MSET", records, 1000)
for key, list in pairs(groups) do redis.call(list[1], key, unpack(list, 2)) end
flag_unplaced()
return #restored
""",
    int,
)


def _entered(job: RestoredJob) -> float:
    """When the job entered its status, for an index of its place scored by that time: each
    of `due`, `started` and `finished` is set for the status it scores only; a cancelling job
    (and any other, which no time scores) 0."""
    times = (job.due, job.started, job.finished)
    return next((when for when in times if when is not None), 0.0)


def restore_jobs(jobs: Sequence[RestoredJob], mark_dirty: bool) -> Call[int]:
    values: list[Any] = []
    for job in jobs:
        values += [job.job_id, job.score, job.node_id, job.status, _entered(job), job.job_type]
        values += [job.priority, job.cpus, job.memory_mb]
        parts = split(job.record)
        values += [parts.head, parts.spec, *parts.outputs, job.schedule]
    return RESTORE_JOBS.call(mark_dirty="1" if mark_dirty else "0", jobs=values)


FINISH_RESTORE = Script(
    "FINISH_RESTORE",
    "highest marker",
    """
-- End the start-up decision (restored, or nothing to restore): raise the id counter to the
-- highest job number restored ("0" when none; never lower it), set the marker (its text says
-- how it was settled), clear the in-progress flag.
local current = tonumber(redis.call("GET", K.job_seq) or "0") or 0
if tonumber(highest) > current then redis.call("SET", K.job_seq, highest) end
redis.call("SET", K.initialised, marker)
redis.call("DEL", K.restoring)
return OK
""",
    lambda _: None,
)


def finish_restore(highest_job_number: int, marker: str) -> Call[None]:
    return FINISH_RESTORE.call(highest=highest_job_number, marker=marker)


UPGRADE_RETIRED = Script(
    "UPGRADE_RETIRED",
    "status ending batch",
    """
-- Jobs an earlier version ended with `status`, a final status of its own then
-- (models.RETIRED_STATUSES), changed to how they end now, `ending` (ENDINGS): the status and
-- failure_reason, and its indexes. They keep their finish time, and had their event. `batch`
-- of them; returns how many entries it read (fewer than `batch`: none are left).
local index, new, reason = K.status(status), ENDINGS[ending][1], ENDINGS[ending][2]
local entries = redis.call("ZRANGE", index, 0, batch - 1, "WITHSCORES")
for i = 1, #entries, 2 do
  local id = entries[i]
  local job = load_job(id)
  if job and job.status == status then
    move_place(id, entries[i + 1], job, new, job.node_id)  -- finished, as it was
    if reason ~= "" then job.failure_reason = reason end
    store_job(id, job)
  else
    redis.call("ZREM", index, id)  -- a stale entry
  end
end
return #entries / 2
""",
    int,
)


def upgrade_retired(status: str, ending: str, batch: int) -> Call[int]:
    return UPGRADE_RETIRED.call(status=status, ending=ending, batch=batch)


SPLIT_RECORD = Script(
    "SPLIT_RECORD",
    "job_id whole head spec stdout stderr",
    """
-- The upgrade from whole records (models/record.py): job `job_id`'s record, `whole` when
-- it was read, put in parts (head, spec, stdout, stderr; "": none), unless a script changed
-- it meanwhile (the next pass reads it again). Returns 1 if it was split, else 0.
if redis.call("GET", K.job(job_id)) ~= whole then return 0 end
redis.call("SET", K.job(job_id), head)
local parts = {spec, stdout, stderr}
local keys = {}
part_keys(job_id, keys)
for i = 2, #keys do
  if parts[i - 1] ~= "" then
    redis.call("SET", keys[i], parts[i - 1])
  else
    redis.call("DEL", keys[i])
  end
end
return 1
""",
    int,
)


def split_record(job_id: str, whole: bytes) -> Call[int]:
    parts = split(whole)
    return SPLIT_RECORD.call(
        job_id=job_id,
        whole=whole,
        head=parts.head,
        spec=parts.spec,
        stdout=parts.outputs[0],
        stderr=parts.outputs[1],
    )


REBUILD_WAITING = Script(
    "REBUILD_WAITING",
    "above batch units now stamp",
    """
-- After a restore (which writes records and indexes only): each waiting job's count and its
-- place among its dependencies' dependents, rebuilt from its `after` and the statuses now in
-- Redis (life.py wait_for): one whose dependency failed fails, one with nothing left to
-- wait for is pending. Up to `batch` waiting jobs numbered above `above`, while `units`
-- last (endings.py: its record's size, DEPENDENCY_UNITS a job it runs after; the endings
-- share them, the rest left to SETTLE_ENDINGS). Returns {1 when waiting jobs may be left,
-- the last number read}.
local entries = redis.call(
  "ZRANGEBYSCORE", K.status("waiting"), "(" .. above, "+inf", "WITHSCORES", "LIMIT", 0, batch)
local last, pace = above, pace_of(tonumber(units))
for i = 1, #entries, 2 do
  if pace.left <= 0 then return {1, last} end
  local id, n = entries[i], entries[i + 1]
  last = n
  local job, raw = load_job(id)
  if job and job.status == "waiting" then
    local after = job.after or {}
    pace.left = pace.left - VISIT_UNITS - DEPENDENCY_UNITS * #after - record_units(#raw)
    local waits, failed = wait_for(id, after)
    if failed then
      set_output(id, job, "stderr", "dependency " .. failed .. " ended failed")
      finish(id, n, job, "dependency_failed", now, stamp, pace)
    elseif waits == 0 then
      release_waiter(id, n, job, stamp)
      store_job(id, job)
    end
  end
end
return {#entries == 2 * tonumber(batch) and 1 or 0, last}
""",
    lambda reply: (bool(reply[0]), float(reply[1])),
)


def rebuild_waiting(above: float, batch: int, now: float) -> Call[tuple[bool, float]]:
    return REBUILD_WAITING.call(
        above=above, batch=batch, units=SETTLE_UNITS, now=now, stamp=rfc3339(now)
    )

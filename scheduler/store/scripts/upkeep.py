"""The scripts of the background work: the timeout sweep, cancels past their grace, pruning,
the jobs of lost nodes and the event outbox (the snapshot's are in snapshot.py). Each with
its call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.models.wire import rfc3339
from scheduler.store.scripts import retry
from scheduler.store.scripts.replies import Lost, Requeued, ids, lost_jobs, requeued
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Batch:
    """One call of a sweep over an index: how many entries it read, which jobs it changed,
    and how many entries it left in the index for a later sweep."""

    read: int
    ids: list[str]
    kept: int = 0


def _batch(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], ids=ids(reply[1:]))


SWEEP_TIMEOUTS = Script(
    "SWEEP_TIMEOUTS",
    f"cutoff now stamp batch node_ttl builtin {retry.ARGV}",
    """
-- The running run-jobs that started before `cutoff` (strictly) timed out: exit -1, "job
-- timed out". One with a max_retries of its own and retries left is tried again (requeue,
-- after its backoff; on its node unless drained: library.py retry_node, builtin "1" with the
-- built-in registry); any other ends failed, failure_reason timed_out, with its event (the
-- original never retried a timeout). Reads only the expired entries of the deadlines,
-- `batch` of them; their waiters as far as one pace goes (endings.py), the rest left to
-- SETTLE_ENDINGS. Returns {number of entries read, ids of the jobs that timed out...}.
local pace = pace_of(SETTLE_UNITS)
local function timed_out(id, n, job)
  job.exit_code = -1
  set_output(id, job, "stderr", "job timed out")
  if job.max_retries and retries_left(job, max_retries) then
    local wait = retry_wait(job, n, backoff, backoff_cap, seed)
    local to = retry_node(job, builtin == "1", tonumber(now) - tonumber(node_ttl))
    requeue(id, n, job, to, true, wait, tonumber(now), stamp, "timed_out")
  else
    finish(id, n, job, "timed_out", now, stamp, pace)
  end
end
return settle_expired(K.deadlines, cutoff, batch, "running", timed_out, pace)
""",
    _batch,
)


def sweep_timeouts(
    now: float,
    timeout_secs: float,
    batch: int,
    retries: RetryPolicy,
    *,
    node_ttl: float,
    builtin: bool = True,
) -> Call[Batch]:
    return SWEEP_TIMEOUTS.call(
        cutoff=now - timeout_secs,
        now=now,
        stamp=rfc3339(now),
        batch=batch,
        node_ttl=node_ttl,
        builtin="1" if builtin else "0",
        **retries.args(),
    )


FINISH_CANCELS = Script(
    "FINISH_CANCELS",
    "cutoff now stamp batch",
    """
-- The cancelling jobs whose agent has not reported them cancelled within the grace (asked
-- before `cutoff`; the original agent cannot be told): ended now as cancelled (failed,
-- failure_reason cancelled), their node's slot free, their event; their waiters as
-- SWEEP_TIMEOUTS'. Returns {number of entries read, ids of the jobs it cancelled...}.
local pace = pace_of(SETTLE_UNITS)
local function unconfirmed(id, n, job)
  if output_is(job, "stderr", "", "") then
    local why = "cancelled: the agent did not confirm within CANCEL_GRACE_SECS"
    set_output(id, job, "stderr", why)
  end
  finish(id, n, job, "cancelled", now, stamp, pace)
end
return settle_expired(K.cancelling, cutoff, batch, "cancelling", unconfirmed, pace)
""",
    _batch,
)


def finish_cancels(cutoff: float, now: float, batch: int) -> Call[Batch]:
    return FINISH_CANCELS.call(cutoff=cutoff, now=now, stamp=rfc3339(now), batch=batch)


def _pruned(reply: list[Any]) -> Batch:
    return Batch(read=reply[0], kept=reply[1], ids=ids(reply[2:]))


PRUNE_FINISHED = Script(
    "PRUNE_FINISHED",
    "cutoff skip batch",
    """
-- Retention: remove from Redis the finished jobs (done or failed) that finished before
-- `cutoff`, with every index entry and their attempts, reading `batch` entries after the
-- `skip` that earlier calls of this sweep kept. Only jobs the snapshot already holds in their final
-- state go: a job in the changed set (or in a snapshot being written) stays until a snapshot
-- has committed it, so a pruned job is never lost, only moved out of Redis to the SQLite
-- file. While one pace lasts (endings.py: a job looked at and its record's size; out of
-- it, entries read says `batch`: call again). Returns {number of entries read, number of
-- entries kept, ids of the jobs removed...}.
local expired = redis.call("ZRANGEBYSCORE", K.finished, "-inf", "(" .. cutoff, "LIMIT", skip, batch)
local kept, removed, read, pace = 0, {}, #expired, pace_of(SETTLE_UNITS)
for _, id in ipairs(expired) do
  if pace.left <= 0 then
    read = tonumber(batch)
    break
  end
  local unwritten = redis.call("SISMEMBER", K.dirty, id) == 1
    or redis.call("SISMEMBER", K.dirty_inflight, id) == 1
  pace.left = pace.left - VISIT_UNITS
  if unwritten then
    kept = kept + 1
  else
    local job, raw = load_job(id)
    pace.left = pace.left - VISIT_UNITS - (raw and record_units(#raw) or 0)
    -- Only a final job is removed; an entry left stale (the job replaced by a restore) goes.
    if job and FINAL[job.status] then
      local keys = {K.attempts(id)}
      part_keys(id, keys)
      redis.call("DEL", unpack(keys))
      leave_place(id, job)
      removed[#removed + 1] = id
    else
      redis.call("ZREM", K.finished, id)
    end
  end
end
return {read, kept, unpack(removed)}
""",
    _pruned,
)


def prune_finished(cutoff: float, skip: int, batch: int) -> Call[Batch]:
    """Remove jobs finished before `cutoff` that the snapshot holds; `skip` entries at the
    head of the index are passed over (jobs a snapshot has not written yet)."""
    return PRUNE_FINISHED.call(cutoff=cutoff, skip=skip, batch=batch)


REQUEUE_LOST = Script(
    "REQUEUE_LOST",
    "lost_cutoff live_cutoff limit builtin",
    """
-- Move the pending jobs of lost nodes (not heard from since lost_cutoff: built-in registry;
-- not seen healthy: external) to live ones (heard from since live_cutoff), round-robin,
-- keeping their place in the queue, at most `limit`. Running jobs are LOSE_RUNNING's.
-- Instance-bound jobs stay: they belong to their node. With the built-in registry
-- (`builtin` "1"), a deleted node with no job left bound to it leaves nodes:compute
-- (forget_if_gone): what a delete left for the sweep, or a deployment before this rule.
-- While one pace lasts (life.py move_each: the caller calls again while jobs move).
-- Returns {job id, from node, to node, ...} for each job moved.
local lost = redis.call("ZRANGEBYSCORE", K.nodes_compute, "-inf", "(" .. lost_cutoff)
if #lost == 0 then return {} end
local live = live_nodes(live_cutoff)
local most, moved, pace = tonumber(limit), {}, pace_of(SETTLE_UNITS)
for _, node in ipairs(lost) do
  move_pending(node, live, most, moved, pace)
  if builtin == "1" then forget_if_gone(node) end
  if #moved >= 3 * most or pace.left <= 0 then break end
end
return moved
""",
    requeued,
)


def requeue_lost(
    now: float, lost_secs: float, node_ttl: float, limit: int, builtin: bool
) -> Call[list[Requeued]]:
    return REQUEUE_LOST.call(
        lost_cutoff=now - lost_secs,
        live_cutoff=now - node_ttl,
        limit=limit,
        builtin="1" if builtin else "0",
    )


LOSE_RUNNING = Script(
    "LOSE_RUNNING",
    f"lost_cutoff live_cutoff limit now stamp {retry.ARGV}",
    """
-- The running jobs of lost nodes (as REQUEUE_LOST's): the agent is gone, and what it ran
-- with it: the node-loss rule (life.py, lose_running). With no live node, a job waits
-- pending on its node (REQUEUE_LOST moves it once one is). At most `limit` jobs, while one
-- pace lasts, which the endings share (the caller calls again while jobs are handled).
-- Returns {job id, from node, to node, new status, ...}.
local lost = redis.call("ZRANGEBYSCORE", K.nodes_compute, "-inf", "(" .. lost_cutoff)
if #lost == 0 then return {} end
local live = live_nodes(live_cutoff)
local most, out, pace = tonumber(limit), {}, pace_of(SETTLE_UNITS)
local policy = {max_retries, backoff, backoff_cap, seed}
for _, node in ipairs(lost) do
  lose_running(node, live, most, out, tonumber(now), stamp, policy, pace)
  if #out >= 4 * most or pace.left <= 0 then break end
end
return out
""",
    lost_jobs,
)


def lose_running(
    now: float, lost_secs: float, node_ttl: float, retries: RetryPolicy, limit: int
) -> Call[list[Lost]]:
    return LOSE_RUNNING.call(
        lost_cutoff=now - lost_secs,
        live_cutoff=now - node_ttl,
        limit=limit,
        now=now,
        stamp=rfc3339(now),
        **retries.args(),
    )


PROMOTE_DUE = Script(
    "PROMOTE_DUE",
    "now live_cutoff batch",
    """
-- The delayed jobs due by `now`, `batch` of them, become pending: on their node while it is
-- live (heard from since `live_cutoff`: the built-in registry's heartbeats, or the sweep's
-- sightings of an external registry's nodes) and not drained, or bound to an instance, else
-- on a live node, round-robin. With no live node a job waits pending on its node
-- (REQUEUE_LOST moves it once one is). A job that asks a fit (or has no node) is placed as
-- a new one is (place.py place): pending on a node that fits, or unplaced. While one pace
-- lasts (endings.py: ENDED_UNITS a job, its record's size and placing; out of it, entries
-- read says `batch`: call again). Then the dashboard's gauges of now's minute (minutes.py
-- SERIES). Returns {entries read, ids of the jobs now pending...}.
local due = redis.call("ZRANGEBYSCORE", K.delayed, "-inf", now, "LIMIT", 0, batch)
local promoted, live, cutoff = {#due}, nil, tonumber(live_cutoff)
local pace = pace_of(SETTLE_UNITS)
for _, id in ipairs(due) do
  if pace.left <= 0 then
    promoted[1] = tonumber(batch)
    break
  end
  local job, raw = load_job(id)
  pace.left = pace.left - ENDED_UNITS - (raw and record_units(#raw) + placing_units(job) or 0)
  if not job or job.status ~= "delayed" then
    redis.call("ZREM", K.delayed, id)  -- a stale entry
  else
    local n, target = number_of(id), job.node_id
    if (job.instance_id or "") ~= "" then
      rebind(id, n, job, "pending", target)
    elseif needs_fit(job) or target == "" then
      place(id, n, job, cutoff)
    else
      if not placeable(target, cutoff) then
        live = live or live_nodes(cutoff)
        target = next_live(live) or target
      end
      rebind(id, n, job, "pending", target)
    end
    store_job(id, job)
    promoted[#promoted + 1] = id
  end
end
sample_gauges(now)
return promoted
""",
    _batch,
)


def promote_due(now: float, node_ttl: float, batch: int) -> Call[Batch]:
    return PROMOTE_DUE.call(now=now, live_cutoff=now - node_ttl, batch=batch)


PLACE_UNPLACED = Script(
    "PLACE_UNPLACED",
    "live_cutoff batch",
    """
-- A pass over the unplaced jobs (place.py), only once room may have appeared: while
-- {P}:unplaced:retry is set (flag_unplaced, by the events that make room), `batch` of them
-- after the score it holds ("-inf": from the head), in queue order, each placed if a node
-- fits now (place.py place: pending on it, its node woken) or its pending_reason brought up
-- to date (stored only when it changed), while one pace lasts (as PROMOTE_DUE's). The flag
-- then holds where the next call goes on, or is deleted at the end. Returns {entries read,
-- ids of the jobs placed...}; fewer entries than `batch`: the pass is over.
local from = redis.call("GET", K.unplaced_retry)
if not from then return {0} end
local entries = redis.call(
  "ZRANGEBYSCORE", K.unplaced, from, "+inf", "WITHSCORES", "LIMIT", 0, batch)
local placed, cutoff, failed = {#entries / 2}, tonumber(live_cutoff), {}
local pace, last = pace_of(SETTLE_UNITS), #entries
for i = 1, #entries, 2 do
  if pace.left <= 0 then
    placed[1], last = tonumber(batch), i - 1
    break
  end
  local id = entries[i]
  local job, raw = load_job(id)
  pace.left = pace.left - ENDED_UNITS - (raw and record_units(#raw) + placing_units(job) or 0)
  if job and job.status == "pending" and job.node_id == "" then
    local before = job.pending_reason
    -- An ask that found no node in this call is not looked for again (place's `failed`).
    local node = place(id, number_of(id), job, cutoff, failed)
    if node then placed[#placed + 1] = id end
    if node or job.pending_reason ~= before then store_job(id, job) end
  else
    redis.call("ZREM", K.unplaced, id)  -- a stale entry
  end
end
if last == #entries and #entries < 2 * tonumber(batch) then
  redis.call("DEL", K.unplaced_retry)
else
  redis.call("SET", K.unplaced_retry, "(" .. entries[last])
end
return placed
""",
    _batch,
)


def place_unplaced(now: float, node_ttl: float, batch: int) -> Call[Batch]:
    """One step of a pass over the unplaced jobs, when one is flagged (else nothing)."""
    return PLACE_UNPLACED.call(live_cutoff=now - node_ttl, batch=batch)


TRIM_OUTBOX = Script(
    "TRIM_OUTBOX",
    "*entries",
    """
-- Remove from the head of the outbox the entries a flush has handed to rq, and only those:
-- a concurrent flush that read the same head has already removed them, and then this
-- removes nothing (the head no longer matches), so no entry is dropped unhanded.
-- Returns the number of entries removed.
local removed = 0
for _, entry in ipairs(entries) do
  if redis.call("LINDEX", K.outbox, 0) ~= entry then break end
  redis.call("LPOP", K.outbox)
  removed = removed + 1
end
return removed
""",
    int,
)


def trim_outbox(handed_over: Sequence[bytes]) -> Call[int]:
    """Drop the outbox entries `handed_over` (read from its head, in order) to rq."""
    return TRIM_OUTBOX.call(entries=handed_over)

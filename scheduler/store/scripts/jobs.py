"""The scripts of the request path: create (create.py, named here too), poll, report and
cancel jobs (the built-in registry's are in nodes.py), each with its call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.models.job import JobUpdate
from scheduler.models.record import digest
from scheduler.models.wire import rfc3339
from scheduler.store.errors import Conflict, JobNotFound
from scheduler.store.scripts import codes, retry
from scheduler.store.scripts.codes import check_access, check_found
from scheduler.store.scripts.create import (
    CREATE_AFTER,
    CREATE_JOB,
    NO_ASKS,
    NO_DEDUP,
    Asks,
    Created,
    Dedup,
    create_job,
    create_job_of,
)
from scheduler.store.scripts.replies import ids
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call, Script

# The creation's names, where the request path's callers (and benchmarks of earlier
# versions) find them.
__all__ = [
    "CANCEL_JOB", "CHECK_REPORT", "CREATE_AFTER", "CREATE_JOB", "NO_ASKS", "NO_DEDUP", "POLL",
    "TRANSITION", "Asks", "Created", "Dedup", "Polled", "cancel_job", "changed", "check_report",
    "create_job", "create_job_of", "poll", "polled", "transition",
]  # fmt: skip


@dataclass(slots=True)  # not frozen: a frozen init is ~0.4 µs more per poll
class Polled:
    """An agent's poll: the jobs to run, and the ids of its jobs being cancelled."""

    jobs: list[bytes]  # their heads (models/record.py): JobStore reads their parts apart
    cancels: list[str]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.cancels)


def polled(reply: list[Any]) -> Polled:
    check_access(reply[0])
    return Polled(jobs=reply[2:], cancels=ids(reply[1]))


POLL = Script(
    "POLL",
    "node max_jobs caller",
    """
-- The agent's poll: the head of the node's queue (higher priority first, oldest first within
-- one: places.py queue_score), at most its free capacity, and the ids of its jobs being
-- cancelled (the API sends them in a header the original agent ignores). A drained node
-- starts nothing new: its running jobs finish, what stayed in its queue waits.
-- An empty queue is answered first, from two reads: most polls find nothing.
-- Returns {OK, {cancelling id, ...}, each job's head (library.py get_jobs)...}
--   | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local cancels = redis.call("ZRANGE", K.node_status(node, "cancelling"), 0, 99)
local queue = K.node_status(node, "pending")
local ids = redis.call("ZRANGE", queue, 0, 0)
if #ids == 0 then return {OK, cancels} end
local free = tonumber(max_jobs) - redis.call("SCARD", K.node_busy(node))
if free <= 0 or is_drained(node) then return {OK, cancels} end
if free > 1 then ids = redis.call("ZRANGE", queue, 0, free - 1) end
local jobs = get_jobs(ids, math.huge)
table.insert(jobs, 1, cancels)
table.insert(jobs, 1, OK)
return jobs
""",
    polled,
    read_only=True,
)


def poll(node_id: str, max_jobs_per_node: int, caller: str) -> Call[Polled]:
    return POLL.call(node=node_id, max_jobs=max_jobs_per_node, caller=caller)


_CONFLICTS = {
    codes.FINISHED: "job already finished",
    codes.ALREADY_RUNNING: "job already running",
    codes.NOT_RUNNING: "job is not running",
    codes.OTHER_NODE: "job is bound to another node",
    codes.CANCELLING: "job is being cancelled",
    codes.NOT_CANCELLING: "job is not being cancelled",
    codes.NOT_DUE: "job is not due yet",
    codes.NOT_PLACED: "job is not placed on a node yet",
}


def changed(reply: list[Any]) -> bytes:
    """The changed job's head (the store reads its other parts beside the call)."""
    code = reply[0]
    codes.check_staged(code)
    check_found(code, JobNotFound)
    if code in _CONFLICTS:
        raise Conflict(_CONFLICTS[code])
    blob: bytes = reply[1]
    return blob


TRANSITION = Script(
    "TRANSITION",
    "job_id status exit_code stdout stderr stdout_staged stderr_staged stdout_digest "
    "stderr_digest now stamp caller reporter node_ttl builtin " + retry.ARGV,
    """
-- An agent's report (PATCH /jobs/{id}), under the state machine:
--   pending -> running; running -> done | failed; failed with retries left -> pending, or
--   delayed by its backoff (library.py requeue, retry_node; the retry policy: retry.py);
--   cancelling -> cancelled (the agent killed it: nothing else is taken from a cancelling job),
--   which ends it failed with failure_reason cancelled (library.py finish).
-- exit_code "" = none; stdout, stderr "" = not sent; an output larger than a record keeps
-- (models/record.py) comes staged instead, its token in stdout_staged, stderr_staged ("":
-- none) and its SHA-1 in stdout_digest, stderr_digest, and is renamed into place, or
-- dropped with any answer but a change; now: epoch s, stamp: the same in RFC 3339;
-- reporter: the reporting node as the body names it ("" = unknown: the Rust agent).
-- A retry off a drained node goes to placement (library.py retry_node; builtin "1": the
-- built-in registry's, which places it at the next pass, else an external one's live nodes).
-- Returns {OK, the job's head} | {NOT_FOUND} | {NOT_READY} (no such job, or a caller refused,
--   in a Redis that lost its data: it may be in the snapshot) | {UNAUTHORIZED} | {FINISHED}
--   | {ALREADY_RUNNING} | {NOT_RUNNING} | {OTHER_NODE} | {CANCELLING} | {NOT_CANCELLING}
--   | {NOT_DUE} (a claim of a delayed job) | {NOT_PLACED} (of a job on no node yet)
--   | {NOT_STAGED} (a staged output is gone)
-- Repeats whose first answer was lost change nothing and answer the job: a claim by the node
-- holding the job (only a known node: a bare claim stays a conflict), and a final report
-- that the stored job already reflects. A node token names its node as well as the body.
-- Who may report is settled before the record is read (library.py job_access).
local sent = {
  {"stdout", stdout, stdout_staged, stdout_digest}, {"stderr", stderr, stderr_staged, stderr_digest}
}
local function unchanged(reply)
  for _, output in ipairs(sent) do
    if output[3] ~= "" then redis.call("DEL", K.staged(output[3])) end
  end
  return reply
end
local access, owner = job_access(caller, job_id)
if access ~= OK then return unchanged({access}) end
for _, output in ipairs(sent) do
  if output[3] ~= "" and redis.call("EXISTS", K.staged(output[3])) == 0 then
    return unchanged({NOT_STAGED})
  end
end
local job, raw = load_job(job_id)
if not job and redis.call("EXISTS", K.initialised) == 0 then return unchanged({NOT_READY}) end
if not job or (owner and job.node_id ~= owner) then return unchanged({NOT_FOUND}) end
if reporter == "" and owner then reporter = owner end
if reporter ~= "" and reporter ~= job.node_id then return unchanged({OTHER_NODE}) end
local old = job.status
if FINAL[old] then
  local ending = ENDINGS[status]  -- nil for a claim
  local same = ending and ending[1] == old and ending[2] == (job.failure_reason or "")
    and (exit_code == "" or tonumber(exit_code) == job.exit_code)
  for _, output in ipairs(sent) do
    local name, text, token, digest = unpack(output)
    same = same and (text == "" and token == "" or output_is(job, name, text, digest))
  end
  return unchanged(same and {OK, raw} or {FINISHED})
end
if old == "cancelling" then
  if status ~= "cancelled" then return unchanged({CANCELLING}) end
elseif status == "cancelled" then
  return unchanged({NOT_CANCELLING})
end
if status == "running" then
  if old == "running" and reporter ~= "" then return unchanged({OK, raw}) end
  if NOT_STARTED[old] and old ~= "pending" then return unchanged({NOT_DUE}) end
  if old == "pending" and job.node_id == "" then return unchanged({NOT_PLACED}) end
  if old ~= "pending" then return unchanged({ALREADY_RUNNING}) end
elseif old ~= "running" and old ~= "cancelling" then
  return unchanged({NOT_RUNNING})
end
if exit_code ~= "" then job.exit_code = tonumber(exit_code) end
for _, output in ipairs(sent) do
  local name, text, token, digest = unpack(output)
  if token ~= "" then
    adopt_output(job_id, job, name, token, digest)
  elseif text ~= "" then
    set_output(job_id, job, name, text)
  end
end
local n = number_of(job_id)
if status ~= "running" then
  if status == "failed" and retries_left(job, max_retries) then
    local wait = retry_wait(job, n, backoff, backoff_cap, seed)
    local to = retry_node(job, builtin == "1", tonumber(now) - tonumber(node_ttl))
    return {OK, requeue(job_id, n, job, to, true, wait, tonumber(now), stamp, "failed")}
  end
  return {OK, finish(job_id, n, job, status, now, stamp)}
end
job.running_at = stamp
move_place(job_id, n, job, "running", job.node_id, now)  -- a run-job's slot and deadline
count_started(job, now)
wake_job(job_id)
return {OK, store_job(job_id, job)}
""",
    changed,
)


def transition(
    job_id: str,
    update: JobUpdate,
    now: float,
    retries: RetryPolicy,
    caller: str,
    node_ttl: float,
    builtin: bool = True,
    staged: Mapping[str, str] | None = None,
) -> Call[bytes]:
    """`staged`: the outputs of `update` that were staged (JobStore.report), by name, with
    their tokens; the update's text of those is not sent, their digest is."""
    staged = staged or {}
    digests = {name: digest(getattr(update, name)) for name in staged}
    return TRANSITION.call(
        job_id=job_id,
        status=update.status,
        exit_code="" if update.exit_code is None else str(update.exit_code),
        stdout="" if "stdout" in staged else update.stdout,
        stderr="" if "stderr" in staged else update.stderr,
        stdout_staged=staged.get("stdout", ""),
        stderr_staged=staged.get("stderr", ""),
        stdout_digest=digests.get("stdout", ""),
        stderr_digest=digests.get("stderr", ""),
        now=now,
        stamp=rfc3339(now),
        caller=caller,
        reporter=update.node_id,
        node_ttl=node_ttl,
        builtin="1" if builtin else "0",
        **retries.args(),
    )


CANCEL_JOB = Script(
    "CANCEL_JOB",
    "job_id now stamp",
    """
-- DELETE /jobs/{id}. A pending or delayed job is cancelled at once (it ends failed,
-- failure_reason cancelled: library.py finish). A running one becomes cancelling: it keeps
-- its node's slot, its timeout no longer applies, and its agent learns it (the poll's
-- X-Cancel-Jobs, the heartbeat's answer), kills it and reports cancelled; an agent that
-- cannot be told (the original) gets 409 on its late report, and the sweep cancels the job
-- CANCEL_GRACE_SECS later (FINISH_CANCELS).
-- Returns {OK, the job's head} (a cancelling job: as it is) | {NOT_FOUND} | {FINISHED}
local job, raw = load_job(job_id)
if not job then return {NOT_FOUND} end
if FINAL[job.status] then return {FINISHED} end
if job.status == "cancelling" then return {OK, raw} end
local n = number_of(job_id)
if NOT_STARTED[job.status] then
  return {OK, finish(job_id, n, job, "cancelled", now, stamp)}
end
move_place(job_id, n, job, "cancelling", job.node_id, now)  -- keeps its slot, not its deadline
wake_node(job.node_id)
wake_job(job_id)
return {OK, store_job(job_id, job)}
""",
    changed,
)


def cancel_job(job_id: str, now: float) -> Call[bytes]:
    return CANCEL_JOB.call(job_id=job_id, now=now, stamp=rfc3339(now))


CHECK_REPORT = Script(
    "CHECK_REPORT",
    "job_id caller",
    """
-- Before the body of an agent's report is read (PATCH /jobs/{id} with a large or unsized
-- body, or in token mode): this caller may report on the job, which exists; neither reads
-- the record (library.py job_access). TRANSITION checks again.
-- Returns OK | NOT_FOUND | NOT_READY (as TRANSITION's) | UNAUTHORIZED
if caller == "open" or caller == "key" then
  if redis.call("EXISTS", K.job(job_id)) == 1 then return OK end
  return redis.call("EXISTS", K.initialised) == 0 and NOT_READY or NOT_FOUND
end
return (job_access(caller, job_id))
""",
    lambda code: check_found(code, JobNotFound),
    read_only=True,
)


def check_report(job_id: str, caller: str) -> Call[None]:
    return CHECK_REPORT.call(job_id=job_id, caller=caller)

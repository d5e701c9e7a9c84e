"""The scripts of the request path: create, place, poll, list, report and cancel jobs (the
built-in registry's are in nodes.py), each with its call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.models.job import MAX_WAITERS, Job, JobUpdate, creation_json, due_of
from scheduler.models.wire import InvalidInput, rfc3339
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.errors import Conflict, IdempotencyMismatch, JobNotFound, StoreNotReady
from scheduler.store.scripts import codes, retry
from scheduler.store.scripts.codes import check_access, check_found
from scheduler.store.scripts.replies import blobs, ids
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Created:
    job: bytes
    duplicate: bool


def _created(reply: list[Any]) -> Created:
    if reply[0] == codes.NOT_READY:
        raise StoreNotReady()
    if reply[0] == codes.NO_NODES:
        raise NoHealthyNodes()
    if reply[0] == codes.MISMATCH:
        raise IdempotencyMismatch()
    if reply[0] == codes.UNKNOWN_AFTER:
        raise InvalidInput(f"invalid after: {str(reply[1], 'utf-8')} is not a job")
    if reply[0] == codes.TOO_MANY:
        dep = str(reply[1], "utf-8")
        raise InvalidInput(f"invalid after: {MAX_WAITERS} jobs already wait for {dep}")
    return Created(job=reply[1], duplicate=reply[0] == codes.DUPLICATE)


@dataclass(frozen=True, slots=True)
class Dedup:
    """What makes a creation idempotent: the job made under `key` (in `space`: "sqs", an SQS
    message; "submit", a POST /jobs Idempotency-Key) for `ttl` seconds, and the fingerprint
    of the request that made it ("" for SQS, whose key covers the body already)."""

    space: str
    key: str
    ttl: int
    fingerprint: str = ""


NO_DEDUP = Dedup("", "", 0)

# A new job's script, shared by CREATE_JOB and CREATE_AFTER (one that runs after others): two
# scripts, so a plain submit's holds none of the dependencies' Lua (about a third of its cost).
_NEW_JOB = """
-- record: the job's JSON without job_id and node_id, which this fills in (the id drawn here,
-- the node placed here: library.py PLACEMENT). due: "" for a job pending now, else the epoch
-- its run_at says: it is delayed until then (its record says so too). priority: the
-- record's, its place in the node's queue (life.py queue_score). With dedup_ttl > 0,
-- dedup_key is an idempotency key (dedup_space "sqs": an SQS message, else a POST /jobs
-- Idempotency-Key) remembered with the job's id and the request's fingerprint: a replay
-- answers the job it made, a replay with another fingerprint MISMATCH, and neither creates
-- anything.
-- Returns {OK, job JSON} | {DUPLICATE, job JSON, "" if the job is gone} | {MISMATCH}
--   | {NO_NODES} | {NOT_READY}{AFTER_CODES}.
-- A Redis that came back empty must get its snapshot back before a new job takes an id the
-- snapshot already holds (snapshot.restore_if_empty sets the marker).
if redis.call("EXISTS", K.initialised) == 0 then return {NOT_READY} end
local dedup = false
if tonumber(dedup_ttl) > 0 then
  dedup = dedup_space == "sqs" and K.sqs_message(dedup_key) or K.submission(dedup_key)
  local seen = redis.call("GET", dedup)
  if seen then
    local id, made_by = string.match(seen, "^(%S+) ?(.*)$")
    if made_by ~= fingerprint then return {MISMATCH} end
    return {DUPLICATE, redis.call("GET", K.job(id)) or ""}
  end
end
{AFTER_CHECKS}local node = pick_node(mode, candidates, tonumber(now), tonumber(node_ttl))
if not node then return {NO_NODES} end
local n = redis.call("INCR", K.job_seq)
local id = "job-" .. n
local job = '{"job_id":' .. cjson.encode(id) .. ',"node_id":' .. cjson.encode(node) .. ','
  .. string.sub(record, 2)
"""
_STORE_NEW = """
redis.call("SET", K.job(id), job)
redis.call("ZADD", K.all_jobs, n, id)
redis.call("ZADD", K.status(status), n, id)
redis.call("ZADD", K.node_jobs(node), n, id)
local score = status == "pending" and queue_score(n, priority) or n
redis.call("ZADD", K.node_status(node, status), score, id)
if status == "delayed" then redis.call("ZADD", K.delayed, due, id) end
redis.call("SADD", K.dirty, id)
count_minute(now, "submitted")
if dedup then
  local value = fingerprint == "" and id or id .. " " .. fingerprint
  redis.call("SET", dedup, value, "EX", tonumber(dedup_ttl))
end
if status == "pending" then wake_node(node) end
"""
_ARGV = "record due priority mode now node_ttl dedup_space dedup_key dedup_ttl fingerprint"

CREATE_JOB = Script(
    "CREATE_JOB",
    f"{_ARGV} *candidates",
    _NEW_JOB.replace("{AFTER_CODES}", "").replace("{AFTER_CHECKS}", "")
    + 'local status = due == "" and "pending" or "delayed"'
    + _STORE_NEW
    + "return {OK, job}\n",
    _created,
)

CREATE_AFTER = Script(
    "CREATE_AFTER",
    f"{_ARGV} after max_waiters stamp *candidates",
    _NEW_JOB.replace(
        "{AFTER_CODES}",
        " | {UNKNOWN_AFTER, id} | {TOO_MANY, id waited for by max_waiters already}\n-- after:"
        " the jobs it runs after (JSON): `waiting` until they are done; failed at once"
        " (dependency_failed) if one has failed",
    ).replace(
        "{AFTER_CHECKS}",
        """local deps = cjson.decode(after)
for _, dep in ipairs(deps) do
  if not redis.call("ZSCORE", K.all_jobs, dep) then return {UNKNOWN_AFTER, dep} end
  if redis.call("SCARD", K.dependents(dep)) >= tonumber(max_waiters) then
    return {TOO_MANY, dep}
  end
end
""",
    )
    + """local waits, failed = wait_for(id, deps)
local status = "pending"
if waits > 0 or failed then
  status = "waiting"
  local decoded = cjson.decode(job)
  decoded.status = "waiting"
  job = encode(decoded)
end"""
    + _STORE_NEW
    + """if failed then
  local decoded = cjson.decode(job)
  decoded.stderr = "dependency " .. failed .. " ended failed"
  job = finish(id, n, decoded, "dependency_failed", now, stamp)
end
return {OK, job}
""",
    _created,
)


def create_job(
    record: bytes,
    placement: Placement,
    now: float,
    node_ttl: float,
    dedup: Dedup = NO_DEDUP,
    due: float | None = None,
    priority: int = 0,
    after: Sequence[str] = (),
) -> Call[Created]:
    """`record` is the new job's JSON object without job_id and node_id; `due`, when it is
    delayed, the epoch of its run_at; `priority` and `after`, the record's."""
    args: dict[str, Any] = dict(
        record=record, due="" if due is None else due, priority=priority, mode=placement.mode,
        now=now, node_ttl=node_ttl, dedup_space=dedup.space, dedup_key=dedup.key,
        dedup_ttl=dedup.ttl if dedup.key else 0, fingerprint=dedup.fingerprint,
        candidates=placement.candidates,
    )  # fmt: skip
    if not after:
        return CREATE_JOB.call(**args)
    after_args = {"after": json.dumps(list(after)), "max_waiters": MAX_WAITERS}
    return CREATE_AFTER.call(**args, **after_args, stamp=rfc3339(now))


def create_job_of(
    job: Job, placement: Placement, now: float, node_ttl: float, dedup: Dedup = NO_DEDUP
) -> Call[Created]:
    """CREATE_JOB for a new job (models.job.stamped): its record and what indexes it."""
    return create_job(
        creation_json(job), placement, now, node_ttl, dedup, due_of(job), job.priority, job.after
    )


@dataclass(slots=True)  # not frozen: a frozen init is ~0.4 µs more per poll
class Polled:
    """An agent's poll: the jobs to run, and the ids of its jobs being cancelled."""

    jobs: list[bytes]
    cancels: list[str]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.cancels)


def polled(reply: list[Any]) -> Polled:
    check_access(reply[0])
    return Polled(jobs=blobs(reply[2:]), cancels=ids(reply[1]))


POLL = Script(
    "POLL",
    "node max_jobs caller",
    """
-- The agent's poll: the head of the node's queue (higher priority first, oldest first within
-- one: life.py queue_score), at most its free capacity, and the ids of its jobs being
-- cancelled (the API sends them in a header the original agent ignores). A drained node
-- starts nothing new: its running jobs finish, what stayed in its queue waits.
-- Returns {OK, {cancelling id, ...}, job JSON, ...} | {UNAUTHORIZED} | {FORBIDDEN}
local access = node_access(caller, node)
if access ~= OK then return {access} end
local cancels = redis.call("ZRANGE", K.node_status(node, "cancelling"), 0, 99)
local free = tonumber(max_jobs) - redis.call("SCARD", K.node_busy(node))
if free <= 0 or is_drained(node) then return {OK, cancels} end
local jobs = get_jobs(redis.call("ZRANGE", K.node_status(node, "pending"), 0, free - 1), math.huge)
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
}


def _changed(reply: list[Any]) -> bytes:
    code = reply[0]
    check_found(code, JobNotFound)
    if code in _CONFLICTS:
        raise Conflict(_CONFLICTS[code])
    blob: bytes = reply[1]
    return blob


TRANSITION = Script(
    "TRANSITION",
    f"job_id status exit_code stdout stderr now stamp caller reporter node_ttl {retry.ARGV}",
    """
-- An agent's report (PATCH /jobs/{id}), under the state machine:
--   pending -> running; running -> done | failed; failed with retries left -> pending, or
--   delayed by its backoff (library.py requeue, retry_node; the retry policy: retry.py);
--   cancelling -> cancelled (the agent killed it: nothing else is taken from a cancelling job),
--   which ends it failed with failure_reason cancelled (library.py finish).
-- exit_code "" = none; stdout, stderr "" = not sent; now: epoch s, stamp: the same in RFC
-- 3339; reporter: the reporting node as the body names it ("" = unknown: the Rust agent).
-- Returns {OK, job JSON} | {NOT_FOUND} | {UNAUTHORIZED} | {FINISHED}
--   | {ALREADY_RUNNING} | {NOT_RUNNING} | {OTHER_NODE} | {CANCELLING} | {NOT_CANCELLING}
--   | {NOT_DUE} (a claim of a delayed job)
-- Repeats whose first answer was lost change nothing and answer the job: a claim by the node
-- holding the job (only a known node: a bare claim stays a conflict), and a final report
-- that the stored job already reflects. A node token names its node as well as the body.
-- Who may report is settled before the record is read (library.py job_access).
local access, owner = job_access(caller, job_id)
if access ~= OK then return {access} end
local job, raw = load_job(job_id)
if not job or (owner and job.node_id ~= owner) then return {NOT_FOUND} end
if reporter == "" and owner then reporter = owner end
if reporter ~= "" and reporter ~= job.node_id then return {OTHER_NODE} end
local old = job.status
if FINAL[old] then
  local function same(sent, stored) return sent == "" or sent == stored end
  local ending = ENDINGS[status]  -- nil for a claim
  if ending and ending[1] == old and ending[2] == (job.failure_reason or "")
    and (exit_code == "" or tonumber(exit_code) == job.exit_code)
    and same(stdout, job.stdout) and same(stderr, job.stderr) then
    return {OK, raw}
  end
  return {FINISHED}
end
if old == "cancelling" then
  if status ~= "cancelled" then return {CANCELLING} end
elseif status == "cancelled" then
  return {NOT_CANCELLING}
end
if status == "running" then
  if old == "running" and reporter ~= "" then return {OK, raw} end
  if NOT_STARTED[old] and old ~= "pending" then return {NOT_DUE} end
  if old ~= "pending" then return {ALREADY_RUNNING} end
elseif old ~= "running" and old ~= "cancelling" then
  return {NOT_RUNNING}
end
if exit_code ~= "" then job.exit_code = tonumber(exit_code) end
if stdout ~= "" then job.stdout = stdout end
if stderr ~= "" then job.stderr = stderr end
local n = redis.call("ZSCORE", K.all_jobs, job_id)
if status ~= "running" then
  if status == "failed" and retries_left(job, max_retries) then
    local wait = retry_wait(job, n, backoff, backoff_cap, seed)
    local to = retry_node(job, tonumber(now), tonumber(node_ttl))
    return {OK, requeue(job_id, n, job, to, true, wait, tonumber(now), stamp, "failed")}
  end
  return {OK, finish(job_id, n, job, status, now, stamp)}
end
job.running_at = stamp
if job.job_type ~= "service" then
  redis.call("SADD", K.node_busy(job.node_id), job_id)
  redis.call("ZADD", K.deadlines, now, job_id)
end
move(job_id, n, job.node_id, old, "running")
count_started(job, now)
job.status = "running"
wake_job(job_id)
return {OK, store_job(job_id, job)}
""",
    _changed,
)


def transition(
    job_id: str, update: JobUpdate, now: float, retries: RetryPolicy, caller: str, node_ttl: float
) -> Call[bytes]:
    return TRANSITION.call(
        job_id=job_id,
        status=update.status,
        exit_code="" if update.exit_code is None else str(update.exit_code),
        stdout=update.stdout,
        stderr=update.stderr,
        now=now,
        stamp=rfc3339(now),
        caller=caller,
        reporter=update.node_id,
        node_ttl=node_ttl,
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
-- Returns {OK, job JSON} (a cancelling job: as it is) | {NOT_FOUND} | {FINISHED}
local job, raw = load_job(job_id)
if not job then return {NOT_FOUND} end
if FINAL[job.status] then return {FINISHED} end
if job.status == "cancelling" then return {OK, raw} end
local n = redis.call("ZSCORE", K.all_jobs, job_id)
if NOT_STARTED[job.status] then
  return {OK, finish(job_id, n, job, "cancelled", now, stamp)}
end
move(job_id, n, job.node_id, job.status, "cancelling")
job.status = "cancelling"
redis.call("ZREM", K.deadlines, job_id)
redis.call("ZADD", K.cancelling, now, job_id)
wake_node(job.node_id)
wake_job(job_id)
return {OK, store_job(job_id, job)}
""",
    _changed,
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
-- Returns OK | NOT_FOUND | UNAUTHORIZED
if caller == "open" or caller == "key" then
  return redis.call("EXISTS", K.job(job_id)) == 1 and OK or NOT_FOUND
end
return (job_access(caller, job_id))
""",
    lambda code: check_found(code, JobNotFound),
    read_only=True,
)


def check_report(job_id: str, caller: str) -> Call[None]:
    return CHECK_REPORT.call(job_id=job_id, caller=caller)

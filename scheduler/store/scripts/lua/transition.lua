--- @include "codes"
--- @include "keys"
--- @include "CARRIED"
--- @include "after_an_attempt"
--- @include "ENDINGS"
--- @include "FINAL"
--- @include "NOT_STARTED"
--- @include "quota_kit"
--- @include "adopt_output"
--- @include "count_started"
--- @include "finish"
--- @include "job_access"
--- @include "load_job"
--- @include "move_job"
--- @include "number_of"
--- @include "output_is"
--- @include "requeue"
--- @include "retries_left"
--- @include "retry_node"
--- @include "retry_wait"
--- @include "set_output"
--- @include "store_job"
--- @include "wake_job"

-- An agent's report (PATCH /jobs/{id}), under the state machine:
--   pending -> running; running -> done | failed; failed with retries left -> pending, or
--   delayed by its backoff (life.lua requeue, retry_node; the retry policy: retry.py);
--   cancelling -> cancelled (the agent killed it: nothing else is taken from a cancelling job),
--   which ends it failed with failure_reason cancelled (settle.lua finish).
-- exit_code "" = none; stdout, stderr "" = not sent; an output larger than a record keeps
-- (models/record.py) comes staged instead, its token in stdout_staged, stderr_staged ("":
-- none) and its SHA-1 in stdout_digest, stderr_digest, and is renamed into place, or
-- dropped with any answer but a change; now: epoch s, stamp: the same in RFC 3339;
-- reporter: the reporting node as the body names it ("" = unknown: the Rust agent).
-- A retry off a drained node goes to placement (drains.lua retry_node; builtin "1": the
-- built-in registry's, which places it at the next pass, else an external one's live nodes).
-- Returns {OK, the job's head} | {NOT_FOUND} | {NOT_READY} (no such job, or a caller refused,
--   in a Redis that lost its data: it may be in the snapshot) | {UNAUTHORIZED} | {FINISHED}
--   | {ALREADY_RUNNING} | {NOT_RUNNING} | {OTHER_NODE} | {CANCELLING} | {NOT_CANCELLING}
--   | {NOT_DUE} (a claim of a delayed job) | {NOT_PLACED} (of a job on no node yet)
--   | {NOT_STAGED} (a staged output is gone) | {OVER_QUOTA} (a claim of a job whose namespace
--   runs all its quota allows: it waits for quota now, or in its node's queue)
-- Repeats whose first answer was lost change nothing and answer the job: a claim by the node
-- holding the job (only a known node: a bare claim stays a conflict), and a final report
-- that the stored job already reflects. A node token names its node as well as the body.
-- Who may report is settled before the record is read (access.lua job_access).
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
-- A claim over its namespace's quota (another node's claim of the same namespace came first:
-- polls count only running jobs) is refused, the job left to wait for quota (admit.lua),
-- or left pending in its node's queue when it stays there (instance-bound, or an external
-- registry's: admit.lua stays).
if status == "running" and redis.call("EXISTS", K.quotas) == 1 then
  local kit = quota_kit()
  if kit.admits(job, {}) ~= kit.ADMIT then
    if not kit.stays(job, builtin) then kit.wait_quota(job_id, number_of(job_id), job) end
    return unchanged({OVER_QUOTA})
  end
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
  -- The record keeps a retried attempt's stderr when a later report sends none (the
  -- original's rule): that stderr is not this attempt's, so its attempt entry leaves it out
  -- (attempts.lua record_attempt takes CARRIED off before anything stores the job).
  if after_an_attempt(job) and stderr == "" and stderr_staged == "" then
    job[CARRIED] = "stderr"
  end
  if status == "failed" and retries_left(job, max_retries) then
    local wait = retry_wait(job, n, backoff, backoff_cap, seed)
    local to = retry_node(job, builtin == "1", tonumber(now) - tonumber(node_ttl))
    return {OK, requeue(job_id, n, job, to, true, wait, tonumber(now), stamp, "failed")}
  end
  return {OK, finish(job_id, n, job, status, now, stamp)}
end
job.running_at = stamp
move_job(job_id, n, job, "running", job.node_id, now)  -- a run-job's slot and deadline
count_started(job, now)
wake_job(job_id)
return {OK, store_job(job_id, job)}

--- @include "codes"
--- @include "keys"
--- @include "attempt_of"
--- @include "job_access"
--- @include "load_job"

-- POST /jobs/{id}/output: a chunk of a running job's stdout or stderr, sent by its agent while
-- it runs (our agent only; the original sends its output with the final report alone).
-- `offset` is how many bytes of that stream this run sent before the chunk: a chunk sent
-- again (its answer lost) is held once, and one past a gap is refused with the offset wanted.
-- A new run (the job's running_at changed: a retry) starts its streams at 0; its chunks are
-- its attempt's. The log keeps `cap` bytes over all attempts (at least one chunk: config.py),
-- the oldest chunks dropped past it, so one chunk's work is O(1) amortised; and `ttl` seconds
-- after its last chunk (PRUNE_FINISHED takes it with its job sooner). Each chunk says
-- how many bytes the log was written before it: a reader finds what it missed by the gap.
-- Returns {OK, the stream's next offset} | {MISMATCH, the offset wanted} | {NOT_RUNNING} (the
-- job is not running on `node`, or a node token is another node's) | a refusal of job_access
-- (NOT_FOUND, UNAUTHORIZED, NOT_READY)
local access, owner = job_access(caller, job_id)
if access ~= OK then return {access} end
local job = load_job(job_id)
local running = job and (job.status == "running" or job.status == "cancelling")
if not running or job.node_id ~= node or (owner and owner ~= node) then
  return {NOT_RUNNING}
end
local state, log = K.job_log_state(job_id), K.job_log(job_id)
local run = job.running_at or ""
if redis.call("HGET", state, "run") ~= run then
  redis.call("HSET", state, "run", run, "stdout", 0, "stderr", 0)
end
local held, at = tonumber(redis.call("HGET", state, stream)), tonumber(offset)
if at > held then return {MISMATCH, held} end
if at + #data <= held then return {OK, held} end  -- held already: an answer was lost
if at < held then data = string.sub(data, held - at + 1) end
local written = redis.call("HINCRBY", state, "written", #data)
local added = redis.call("XADD", log, "*", "s", stream == "stdout" and "o" or "e",
  "a", attempt_of(job), "w", written - #data, "d", data)
local bytes = redis.call("HINCRBY", state, "bytes", #data)
local cut = 0
while bytes - cut > tonumber(cap) do
  local oldest = redis.call("XRANGE", log, "-", "+", "COUNT", 1)[1]
  if not oldest or oldest[1] == added then  -- it lost entries its count holds (evicted...)
    cut = bytes - #data
    break
  end
  redis.call("XDEL", log, oldest[1])
  cut = cut + #oldest[2][8]  -- its fields: s, o|e, a, attempt, w, written before, d, text
end
if cut > 0 then
  redis.call("HINCRBY", state, "bytes", -cut)
  redis.call("HINCRBY", state, "dropped", cut)
end
redis.call("EXPIRE", log, ttl)
redis.call("EXPIRE", state, ttl)
redis.call("PUBLISH", K.log_channel(job_id), "")
return {OK, redis.call("HINCRBY", state, stream, #data)}

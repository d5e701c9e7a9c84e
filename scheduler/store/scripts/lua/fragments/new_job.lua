-- A new job's start, shared by CREATE_JOB and CREATE_AFTER (one that runs after others): two
-- scripts, so a plain submit's holds none of the dependencies' Lua (about a third of its cost).
-- fields: the members of the head of the job's record (models/record.py), without job_id,
-- node_id and pending_reason, which this writes before them; spec_staged: the token of
-- its spec staged apart ("": none, the head holds it), renamed into place, or dropped
-- when nothing is made (the id drawn here, the node placed here: place.lua pick_node, by
-- mode and the job's asks: cpus, memory_mb and selector, the record's, its node_selector
-- as JSON or ""). A job no node can take now is
-- still made, pending unplaced (node_id "", place.lua) with its pending_reason; only one
-- that asks nothing answers NO_NODES when no compute node is live (the original's 503). A
-- delayed job that asks a fit is placed when due. due: "" for a job pending now, else the epoch
-- its run_at says: it is delayed until then (its record says so too). priority: the
-- record's, its place in the node's queue (places.py queue_score). With dedup_ttl > 0,
-- dedup_key is an idempotency key (dedup_space "sqs": an SQS message, else a POST /jobs
-- Idempotency-Key) remembered with the job's id and the request's fingerprint: a replay
-- answers the job it made, a replay with another fingerprint MISMATCH, and neither creates
-- anything. schedule: the schedule that made it ("": none), whose index it enters;
-- namespace: the job's ("": the default), whose indexes it enters.
-- elsewhere = 1: another shard may take the job (store/jobs.py): with no node for it,
-- NO_NODES rather than made unplaced, its idempotency key then marked ELSEWHERE.
local function unmade(reply)
  if spec_staged ~= "" then redis.call("DEL", K.staged(spec_staged)) end
  return reply
end
--- @insert "ready"
if spec_staged ~= "" and redis.call("EXISTS", K.staged(spec_staged)) == 0 then
  return {NOT_STAGED}
end
local dedup = false
if tonumber(dedup_ttl) > 0 then
  dedup = dedup_key_of(dedup_space, dedup_key)
  local seen = redis.call("GET", dedup)
  --- @insert "key_seen"
end
-- Its namespace's quota (quota.lua; one HGET when it has none): a namespace holding all the
-- pending jobs it may, or a job asking more than it may ever run, makes nothing.
local refused = quota_refusal(namespace, cpus, memory_mb)
if refused then
  return unmade({OVER_QUOTA, namespace, refused[1], refused[2], refused[3]})
end

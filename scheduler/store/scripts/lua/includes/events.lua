--- @include "keys"
--- @include "EVENTS_KEPT"
--- @include "EVENTS_TRIM_EVERY"
--- @include "move_place"

-- The job events (models/event.py, GET /events): one per change of a job's status or node,
-- written here in the script that makes it, so the event and the change are one atomic step.
-- Its id is Redis' own (its clock's ms), which GET /events resumes after and the sweep trims
-- by age; its number is the shard's event number, which an ending's outbox entry shares.

-- The event of job `id` (its record `job` as it is now) from status `old` on node `from`;
-- returns its number. `ns` is its namespace ("" the default's: GET /events filters by it).
local function note_event(id, job, old, from)
  local n = redis.call("INCR", K.event_seq)
  -- Trimmed to about EVENTS_KEPT once every EVENTS_TRIM_EVERY events, not at each: a MAXLEN on
  -- every XADD was a sixth of an event's cost, and the stream holds at most EVENTS_TRIM_EVERY
  -- more between trims.
  if n % EVENTS_TRIM_EVERY == 0 then redis.call("XTRIM", K.events, "MAXLEN", "~", EVENTS_KEPT) end
  redis.call("XADD", K.events, "*", "n", n, "job", id,
    "from", old, "to", job.status, "was", from or "", "node", job.node_id or "",
    "schedule", job.schedule or "", "reason", job.failure_reason or "",
    "ns", job.namespace or "")
  redis.call("PUBLISH", K.events_channel, "")
  return n
end

-- Job `id` (number n) to status `new` on node `to` (places.py move_place, `at` as there), its
-- event noted once the record says where it is; `reason` a failure_reason to set first.
-- Returns the event's number (nil: the job stays where it was, no event).
local function move_job(id, n, job, new, to, at, reason)
  local old, from = job.status, job.node_id
  move_place(id, n, job, new, to, at)
  if reason and reason ~= "" then job.failure_reason = reason end
  if old == new and (from or "") == (to or "") then return nil end  -- not a change
  return note_event(id, job, old, from)
end

--- @include "keys"
--- @include "EVENTS_KEPT"
--- @include "EVENT_COUNT"
--- @include "move_place"

-- The job events (models/event.py, GET /events): one per change of a job's status or node,
-- written here in the script that makes it, so the event and the change are one atomic step.
-- Its id is Redis' own (its clock's ms), which GET /events resumes after and the sweep trims
-- by age. Its number is the job's own: its events counted in its head (EVENT_COUNT, never on
-- the wire; 1 when it is made), which an ending's outbox entry and its waiters' set share.
-- A shard-wide number cost an INCR at every change; a follower counts the events trimmed
-- before it read them from the stream's own count of entries added (api/events.py).
-- Fields that say nothing are left out (an XADD pays for each): `from` for a new job,
-- `was` when it is `node` or the job is new, `node`, `schedule`, `reason` when empty
-- (models/event.py `event_of` reads them so).

-- The count after each small one, as text: a Lua number given to Redis, or to cjson in the
-- head, is formatted (snprintf, ~2 300 instructions).
local NEXT_COUNT = {}
for i = 0, 99 do NEXT_COUNT[i .. ""] = (i + 1) .. "" end  -- (no tostring when loaded)

-- The event of job `id` (its record `job` as it is now) from status `old` on node `from`;
-- returns its number (the job's count, as text).
local function note_event(id, job, old, from)
  local seen = job[EVENT_COUNT]
  local n = NEXT_COUNT[seen or "0"] or tostring((tonumber(seen) or 0) + 1)
  job[EVENT_COUNT] = n
  local to, node = job.status, job.node_id or ""
  local schedule = type(job.schedule) == "string" and job.schedule or ""
  local reason = type(job.failure_reason) == "string" and job.failure_reason or ""
  if old == "" and schedule == "" then
    redis.call("XADD", K.events, "MAXLEN", "~", EVENTS_KEPT, "*", "n", n, "job", id, "to", to,
      "node", node)
  elseif from == node and schedule == "" and reason == "" then
    redis.call("XADD", K.events, "MAXLEN", "~", EVENTS_KEPT, "*", "n", n, "job", id, "from", old,
      "to", to, "node", node)
  else
    local fields = {"n", n, "job", id, "to", to}
    local function add(name, value)
      if value ~= "" then fields[#fields + 1], fields[#fields + 2] = name, value end
    end
    add("from", old)
    add("node", node)
    if old ~= "" and from ~= node then fields[#fields + 1], fields[#fields + 2] = "was", from end
    add("schedule", schedule)
    add("reason", reason)
    redis.call("XADD", K.events, "MAXLEN", "~", EVENTS_KEPT, "*", unpack(fields))
  end
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
  return note_event(id, job, old, from or "")
end

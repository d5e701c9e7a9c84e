--- @include "keys"

-- GET /events' read of a shard's job events (api/events.py): those from `start` on (an
-- XRANGE start: "(<id>" after that one, "<id>" from it, "-" from the oldest kept), at most
-- `count`, oldest first; or, `start` "+", the newest alone. With the stream's counts at the
-- same instant (XINFO STREAM): the entries ever added, and those trimmed (added less kept),
-- from which a follower that knows how many were added up to its place counts the ones
-- trimmed before it read them (events are numbered by job, not by shard: events.lua).
-- Returns {trimmed, added, {id, {field, value, ...}}...}; {0, 0} with no stream yet.
if redis.call("EXISTS", K.events) == 0 then return {0, 0} end
local info = redis.call("XINFO", "STREAM", K.events)
local added, length = 0, 0
for i = 1, #info, 2 do
  if info[i] == "entries-added" then
    added = info[i + 1]
  elseif info[i] == "length" then
    length = info[i + 1]
  end
end
local entries = start == "+" and redis.call("XREVRANGE", K.events, "+", "-", "COUNT", "1")
  or redis.call("XRANGE", K.events, start, "+", "COUNT", count)
table.insert(entries, 1, added)
table.insert(entries, 1, added - length)
return entries

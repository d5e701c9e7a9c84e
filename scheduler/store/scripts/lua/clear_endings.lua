--- @include "keys"

-- A restore rebuilds every waiting job's count and dependents from the statuses it restored
-- (snapshot.py REBUILD_WAITING): the endings left to settle from before would count again.
-- `batch` of them dropped with their sets, each of up to MAX_WAITERS waiters: UNLINK frees
-- a large one in the background (a DEL of 500 sets of 1000 held Redis ~100 ms). Returns how
-- many.
local entries = redis.call("ZRANGE", K.endings, 0, tonumber(batch) - 1)
for _, entry in ipairs(entries) do
  redis.call("UNLINK", K.ending_waiters(string.match(entry, "^%S+ (%S+)")))
  redis.call("ZREM", K.endings, entry)
end
return #entries

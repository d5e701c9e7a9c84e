--- @include "keys"

-- The libraries the worker deleted, forgotten: each only while its mark is still older than
-- `cutoff` (RETIRED_LIBRARIES' now less the grace). One marked again since (a process of that
-- release still runs: it loaded it again on the missing function) stays, to be deleted once
-- it is unmarked for the grace again.
-- Returns the number forgotten
local forgotten = 0
for _, name in ipairs(names) do
  local mark = tonumber(redis.call("ZSCORE", K.libraries, name))
  if mark and mark < tonumber(cutoff) then
    forgotten = forgotten + redis.call("ZREM", K.libraries, name)
  end
end
return forgotten

--- @include "keys"

-- Remove from the head of the outbox the entries a flush has handed to rq, and only those:
-- a concurrent flush that read the same head has already removed them, and then this
-- removes nothing (the head no longer matches), so no entry is dropped unhanded.
-- Returns the number of entries removed.
local removed = 0
for _, entry in ipairs(entries) do
  if redis.call("LINDEX", K.outbox, 0) ~= entry then break end
  redis.call("LPOP", K.outbox)
  removed = removed + 1
end
return removed

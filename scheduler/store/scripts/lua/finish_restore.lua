--- @include "codes"
--- @include "keys"

-- End the start-up decision (restored, or nothing to restore): raise the id counter to the
-- highest job number restored ("0" when none; never lower it), set the marker (its text says
-- how it was settled), clear the in-progress flag.
local current = tonumber(redis.call("GET", K.job_seq) or "0") or 0
if tonumber(highest) > current then redis.call("SET", K.job_seq, highest) end
redis.call("SET", K.initialised, marker)
redis.call("DEL", K.restoring)
return OK

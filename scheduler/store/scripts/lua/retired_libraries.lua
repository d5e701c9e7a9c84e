--- @include "keys"

-- The worker's sweep: `library`, the function library this process runs, marked in use now
-- (Redis's time, as every mark), and the libraries no process has marked for `grace`
-- seconds, which the worker deletes (FUNCTION DELETE: no script may) and then forgets
-- (FORGET_LIBRARIES). At most `limit`, oldest first.
-- Returns {now, name, ...}
local now = tonumber(redis.call("TIME")[1])
redis.call("ZADD", K.libraries, now, library)
local out = redis.call("ZRANGEBYSCORE", K.libraries, "-inf", "(" .. (now - tonumber(grace)),
  "LIMIT", 0, tonumber(limit))
table.insert(out, 1, now)
return out

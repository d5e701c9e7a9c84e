--- @include "keys"

-- Adds each (field, delta) pair of deltas to the deployment's request metrics, then, when
-- read is "1", returns them all (flat field, value pairs; else an empty table). Floats: a
-- latency sum is one, and a count stays exact in one far past any process's lifetime.
-- library: the function library the API process runs (functions.py), marked in use now
-- (Redis's time), so no worker deletes it while the process serves (retire.py).
for i = 1, #deltas, 2 do
  redis.call("HINCRBYFLOAT", K.request_stats, deltas[i], deltas[i + 1])
end
redis.call("ZADD", K.libraries, redis.call("TIME")[1], library)
if read == "1" then return redis.call("HGETALL", K.request_stats) end
return {}

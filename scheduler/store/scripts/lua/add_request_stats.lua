--- @include "keys"

-- Adds each (field, delta) pair of deltas to the deployment's request metrics, then, when
-- read is "1", returns them all (flat field, value pairs; else an empty table). Floats: a
-- latency sum is one, and a count stays exact in one far past any process's lifetime.
for i = 1, #deltas, 2 do
  redis.call("HINCRBYFLOAT", K.request_stats, deltas[i], deltas[i + 1])
end
if read == "1" then return redis.call("HGETALL", K.request_stats) end
return {}

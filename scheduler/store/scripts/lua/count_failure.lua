--- @include "keys"

-- A wrong credential from `address` (a login, a key, a node token, a join key where it is
-- not taken: api/guesses.py): counted in a window of `window_ms` that starts with the first.
-- Returns {failures in the window, ms the window has left}.
local key = K.auth_failures(address)
local failures = redis.call("INCR", key)
local left = redis.call("PTTL", key)
if left < 0 then
  redis.call("PEXPIRE", key, window_ms)
  left = tonumber(window_ms)
end
return {failures, left}

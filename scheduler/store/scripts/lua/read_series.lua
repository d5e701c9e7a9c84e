--- @include "keys"

-- `count` minutes from minute number `first` (epoch seconds / 60), oldest first: each its
-- hash, flat ({} for a minute nothing changed in, or one expired).
local out = {}
for minute = tonumber(first), tonumber(first) + tonumber(count) - 1 do
  out[#out + 1] = redis.call("HGETALL", K.series(string.format("%d", minute)))
end
return out

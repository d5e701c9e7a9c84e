--- @include "keys"

-- The deployment's UI secret: the one stored, or `fresh` stored now when there is none
-- (the first replica to ask makes it; every other reads the same).
local secret = redis.call("GET", K.ui_secret)
if not secret then
  redis.call("SET", K.ui_secret, fresh)
  secret = fresh
end
return secret

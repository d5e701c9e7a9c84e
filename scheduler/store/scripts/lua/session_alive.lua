--- @include "keys"

-- Whether the session exists (logged in, not logged out, not past its TTL).
return redis.call("EXISTS", K.ui_session(session))

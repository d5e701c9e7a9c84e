--- @include "keys"

-- Who the session is (logged in, not logged out, not past its TTL): its value, nil when gone.
return redis.call("GET", K.ui_session(session))

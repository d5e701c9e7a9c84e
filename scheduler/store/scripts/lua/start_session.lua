--- @include "keys"

-- A login: the session (its id's SHA-256) lives `ttl_ms` from now, not renewed by use.
redis.call("SET", K.ui_session(session), "1", "PX", ttl_ms)
return 1

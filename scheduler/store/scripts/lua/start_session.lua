--- @include "keys"

-- A login: the session (its id's SHA-256) lives `ttl_ms` from now, not renewed by use. Its
-- value is who logged in (`who`: the key's name, role and key_id, JSON), which SESSION_ALIVE gives
-- the door.
redis.call("SET", K.ui_session(session), who, "PX", ttl_ms)
return 1

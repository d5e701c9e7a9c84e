--- @include "keys"

-- GET /audit: the newest `count` entries of the audit stream, newest first, each
-- {id, {field, value, ...}}.
return redis.call("XREVRANGE", K.audit, "+", "-", "COUNT", count)

--- @include "keys"

-- A logout: the session stops working on every replica at once.
return redis.call("DEL", K.ui_session(session))

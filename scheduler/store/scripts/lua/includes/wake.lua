--- @include "keys"

-- Long-polls (connection/notify.py) wait on these channels; a PUBLISH nobody listens to
-- costs Redis one hash lookup.

local function wake_node(node) redis.call("PUBLISH", K.node_channel(node), "") end

local function wake_job(id) redis.call("PUBLISH", K.job_channel(id), "") end

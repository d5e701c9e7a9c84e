"""The listing script of GET /jobs, with its call."""

from __future__ import annotations

from scheduler.store.scripts.replies import blobs
from scheduler.store.scripts.script import Call, Script

LIST = Script(
    "LIST",
    "node status bound limit budget order",
    """
-- A page of the index that answers GET /jobs with these filters (each may be ""), in job
-- number order ("asc": numbers above `bound`), or newest first ("desc": below `bound`, 0 from
-- the newest). A page stops at `limit` jobs or `budget` bytes. Returns job JSON strings.
local index = K.all_jobs
if node ~= "" and status ~= "" then
  index = K.node_status(node, status)
elseif node ~= "" then
  index = K.node_jobs(node)
elseif status ~= "" then
  index = K.status(status)
end
local ids
if order == "desc" then
  local top = bound == "0" and "+inf" or "(" .. bound
  ids = redis.call("ZREVRANGEBYSCORE", index, top, "-inf", "LIMIT", 0, limit)
else
  ids = redis.call("ZRANGEBYSCORE", index, "(" .. bound, "+inf", "LIMIT", 0, limit)
end
return get_jobs(ids, tonumber(budget))
""",
    blobs,
    read_only=True,
)


def list_jobs(
    node_id: str, status: str, bound: int, limit: int, budget_bytes: int, newest: bool = False
) -> Call[list[bytes]]:
    """Oldest first from after job-`bound`, or with `newest` newest first from before it
    (0: from the newest)."""
    return LIST.call(
        node=node_id,
        status=status,
        bound=bound,
        limit=limit,
        budget=budget_bytes,
        order="desc" if newest else "asc",
    )

"""The listing scripts, each with its call: GET /jobs, and GET /jobs/{id}/attempts."""

from __future__ import annotations

from typing import Any

from scheduler.store.errors import JobNotFound
from scheduler.store.scripts.codes import check_found
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


def _attempts(reply: list[Any]) -> list[bytes]:
    check_found(reply[0], JobNotFound)
    return blobs(reply[1:])


ATTEMPTS = Script(
    "ATTEMPTS",
    "job_id",
    """
-- GET /jobs/{id}/attempts: the job's ended attempts, oldest first, as life.py's
-- record_attempt wrote them (the last ATTEMPTS_KEPT). Returns {OK, attempt JSON, ...}
--   | {NOT_FOUND}
if redis.call("EXISTS", K.job(job_id)) == 0 then return {NOT_FOUND} end
local out = redis.call("LRANGE", K.attempts(job_id), 0, -1)
table.insert(out, 1, OK)
return out
""",
    _attempts,
    read_only=True,
)


def attempts(job_id: str) -> Call[list[bytes]]:
    """The job's attempts (JSON each, models.attempt.Attempt); JobNotFound without the job."""
    return ATTEMPTS.call(job_id=job_id)

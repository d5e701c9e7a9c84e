"""The listing scripts, each with its call: GET /jobs, and GET /jobs/{id}/attempts."""

from __future__ import annotations

from typing import Any

from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.errors import JobNotFound
from scheduler.store.scripts import codes
from scheduler.store.scripts.codes import check_found
from scheduler.store.scripts.replies import blobs
from scheduler.store.scripts.script import Call, Script

LIST = Script(
    "LIST",
    "node status bound limit budget order",
    """
-- A page of the index that answers GET /jobs with these filters (each may be ""), in job
-- number order ("asc": numbers above `bound`), or newest first ("desc": below `bound`, 0 from
-- the newest). A node's pending jobs are listed in its queue's order instead (life.py
-- queue_score: higher priority first, oldest first within one; "desc" from the back), from
-- the place of job-`bound` in it (its number and priority: priority 0 for a job not stored),
-- so a page starts just after the last job of the one before. A page stops at `limit` jobs
-- or `budget` bytes. Returns job JSON strings.
local index = K.all_jobs
if node ~= "" and status ~= "" then
  index = K.node_status(node, status)
elseif node ~= "" then
  index = K.node_jobs(node)
elseif status ~= "" then
  index = K.status(status)
end
local from = "(" .. bound
if bound == "0" then
  from = order == "desc" and "+inf" or "-inf"
elseif node ~= "" and status == "pending" then
  local job = load_job("job-" .. bound)
  from = string.format("(%.17g", queue_score(tonumber(bound), job and job.priority))
end
local ids
if order == "desc" then
  ids = redis.call("ZREVRANGEBYSCORE", index, from, "-inf", "LIMIT", 0, limit)
else
  ids = redis.call("ZRANGEBYSCORE", index, from, "+inf", "LIMIT", 0, limit)
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
    (0: from the newest); a node's pending jobs in queue order from job-`bound`'s place."""
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


def _picked(reply: list[Any]) -> str:
    if reply[0] == codes.NO_NODES:
        raise NoHealthyNodes()
    return str(reply[1], "utf-8")


PICK_NODE = Script(
    "PICK_NODE",
    "mode now node_ttl *candidates",
    """
-- GET /schedule: the node the next job would go to (the ticket advances, as the original's).
-- Returns {OK, node id} | {NO_NODES}
local node = pick_node(mode, candidates, tonumber(now), tonumber(node_ttl))
if not node then return {NO_NODES} end
return {OK, node}
""",
    _picked,
)


def pick_node(placement: Placement, now: float, node_ttl: float) -> Call[str]:
    return PICK_NODE.call(
        mode=placement.mode, now=now, node_ttl=node_ttl, candidates=placement.candidates
    )

"""The listing scripts, each with its call: GET /jobs, GET /jobs/{id}/attempts, and the web
UI's jobs page (its search, its counts per status)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store.errors import JobNotFound
from scheduler.store.scripts import codes
from scheduler.store.scripts.codes import check_found
from scheduler.store.scripts.replies import blobs
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Page:
    """A page of GET /jobs: its jobs' heads, and whether it left out jobs it was asked for
    (for its bytes, or a record gone meanwhile): a sharded listing's merge must not page
    past its last (store/merging.py)."""

    jobs: list[bytes]
    cut: bool


def _page(reply: list[Any]) -> Page:
    return Page(jobs=blobs(reply[1:]), cut=bool(reply[0]))


LIST = Script(
    "LIST",
    "node status schedule bound limit budget order",
    """
-- A page of GET /jobs (library.py listing_ids says which jobs, in which order); it stops at
-- `limit` jobs or `budget` bytes.
-- Returns {1 if it left out jobs it was asked for, else 0; each job's head (get_jobs)...}
local ids = listing_ids(node, status, schedule, bound, order, limit)
local page = get_jobs(ids, tonumber(budget))
table.insert(page, 1, #page < #ids and 1 or 0)
return page
""",
    _page,
    read_only=True,
)


def list_jobs(
    node_id: str,
    status: str,
    bound: int,
    limit: int,
    budget_bytes: int,
    newest: bool = False,
    schedule: str = "",
) -> Call[Page]:
    """Oldest first from after job-`bound`, or with `newest` newest first from before it
    (0: from the newest); a node's pending jobs in queue order from job-`bound`'s place;
    with `schedule`, the jobs that schedule made (node_id and status ignored)."""
    return LIST.call(
        node=node_id,
        status=status,
        schedule=schedule,
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
-- GET /schedule: the node the next job that asks nothing would go to (the ticket advances,
-- as the original's).
-- Returns {OK, node id} | {NO_NODES}
local node = pick_node(mode, candidates, {}, tonumber(now) - tonumber(node_ttl))
if not node then return {NO_NODES} end
return {OK, node}
""",
    _picked,
)


def pick_node(placement: Placement, now: float, node_ttl: float) -> Call[str]:
    return PICK_NODE.call(
        mode=placement.mode, now=now, node_ttl=node_ttl, candidates=placement.candidates
    )


# How much of a job's head (or spec kept apart) SEARCH reads first: its command comes before
# any large field, so a short one ends within it.
SEARCH_HEAD_BYTES = 2048
# The record bytes one SEARCH call reads: about 5 ms of Redis (benchmarks/script_bounds.py).
SEARCH_READ_BYTES = 512 << 10


@dataclass(frozen=True, slots=True)
class Found:
    """A search's page (SEARCH): the jobs found, how many jobs were looked through, the
    number of the last one looked at (0: none), where a search of older jobs goes on, and
    whether the listing holds older jobs than those looked through."""

    jobs: list[bytes]
    looked: int
    last: int
    more: bool


def _found(reply: list[Any]) -> Found:
    looked, last, more, *jobs = reply
    return Found(blobs(jobs), int(looked), int(last), bool(more))


SEARCH = Script(
    "SEARCH",
    "node status bound needle scan limit budget read",
    f"""
-- The web UI's search: of the `scan` jobs the newest-first listing with these filters holds
-- from `bound` (library.py listing_ids), those whose command holds `needle` (given in lower
-- case: ASCII case is ignored), up to `limit`, their page stopping at `budget` bytes. Only
-- the start of a job's head is read, or of its spec when that is kept apart
-- (models/record.py): each is written with the command at its top level before any object
-- (msgspec after the ids, in Job's order; a script first: record.py ENCODE), so the first
-- `"command":"` with no brace before it is the command's (one after a brace is a key of
-- env_vars or a selector). In a record's JSON a `,"` never falls inside a string (each quote
-- in one is escaped), so the first after the command's opening quote ends it (or the
-- closing `"}}`, when the command is a spec's only field); a command longer than what was
-- read is read again 8 times larger, until it ends. The cost is bounded by `scan` and by
-- `read`, the bytes of records read (it stops before a job once past it, the first one
-- always read: the store goes on from the last one, store/search.py), not by the jobs
-- stored or their output.
-- Returns {{jobs looked at, number of the last, 1 if older jobs are left (else 0), each
-- job's head (library.py get_jobs)...}}
local read_bytes = 0
local function command_in(key)
  local size = {SEARCH_HEAD_BYTES}
  local head = redis.call("GETRANGE", key, 0, size - 1)
  read_bytes = read_bytes + #head
  local from = string.find(head, '"command":"', 1, true)
  if not from or string.find(string.sub(head, 2, from - 1), "{{", 1, true) then return nil end
  from = from + 11
  local stop = string.find(head, ',"', from, true)
  while not stop and #head == size do  -- a longer command: 8 times more of it
    size = size * 8
    head = redis.call("GETRANGE", key, 0, size - 1)
    read_bytes = read_bytes + #head
    stop = string.find(head, ',"', from, true)
  end
  if not stop and #head < size and string.sub(head, -2) == '"}}' then stop = #head end
  if not stop then return nil end
  local raw = string.sub(head, from, stop - 2)
  if not string.find(raw, "\\92", 1, true) then return raw end  -- no backslash: no escape
  return cjson.decode('"' .. raw .. '"')
end

local function command_of(id)
  return command_in(K.job(id)) or command_in(K.job_spec(id)) or ""
end

local found, looked, last = {{}}, 0, "job-0"
local ids = listing_ids(node, status, "", bound, "desc", tonumber(scan) + 1)
for i, id in ipairs(ids) do
  if i > tonumber(scan) or read_bytes >= tonumber(read) then break end
  looked = looked + 1
  last = id
  if string.find(string.lower(command_of(id)), needle, 1, true) then
    found[#found + 1] = id
    if #found >= tonumber(limit) then break end
  end
end
-- The last one's number; 0 for an old snapshot's row that is not job-N (its score is below
-- job-1's, so only such rows follow it): no number bound reaches them, none is said left.
local stop = math.floor(number_of(last))
local out = get_jobs(found, tonumber(budget))
table.insert(out, 1, #ids > looked and stop > 0 and 1 or 0)
table.insert(out, 1, stop)
table.insert(out, 1, looked)
return out
""",
    _found,
    read_only=True,
)


def search(
    node_id: str,
    status: str,
    bound: int,
    needle: str,
    scan: int,
    limit: int,
    budget: int,
    read: int = SEARCH_READ_BYTES,
) -> Call[Found]:
    """Up to `limit` of the `scan` newest jobs before job-`bound` (0: from the newest) with
    these filters whose command holds `needle`, ignoring ASCII case; at most about `read`
    bytes of records read (store/search.py goes on from the last job looked at)."""
    return SEARCH.call(
        node=node_id,
        status=status,
        bound=bound,
        needle=needle.encode().lower().decode(),  # ASCII only, as Lua's string.lower
        scan=scan,
        limit=limit,
        budget=budget,
        read=read,
    )


COUNTS = Script(
    "COUNTS",
    "node *statuses",
    """
-- The web UI's jobs page: how many jobs each status holds, of one node or of all, and how
-- many in all. Returns {all, count of each of `statuses`, ...}
local out = {redis.call("ZCARD", node == "" and K.all_jobs or K.node_jobs(node))}
for _, status in ipairs(statuses) do
  local index = node == "" and K.status(status) or K.node_status(node, status)
  out[#out + 1] = redis.call("ZCARD", index)
end
return out
""",
    lambda reply: [int(count) for count in reply],
    read_only=True,
)


def counts(node_id: str, statuses: Sequence[str]) -> Call[list[int]]:
    """[all jobs, then each status's] of `node_id`'s jobs ("": every node's)."""
    return COUNTS.call(node=node_id, statuses=statuses)

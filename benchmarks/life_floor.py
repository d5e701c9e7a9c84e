"""The floors of life_cost.py: the least Redis work a job's life, a heartbeat and a poll need,
as plain Lua scripts run by EVALSHA, one call per round trip (as the API makes one per
request). Two sets, each a class of the same shape: its scripts, the arguments of each call,
what its answers mean.

Floor, the issue's floor, a life in four scripts, the issue's list exactly:
  create   INCR the id, SET a 300-byte record, ZADD two indexes (every job; the node's queue)
  poll     ZRANGEBYSCORE the node's queue for one id, GET its record
  running  GET the record, SET it, ZREM it from the queue, ZADD it to the running index
  done     GET, SET, ZREM from running, ZADD to the finished index, RPUSH an event
A heartbeat is one script: HGET the node's record (a heartbeat of an unknown node is refused,
and the answer is the node) and ZADD its last-seen time (what placement reads for liveness).
A poll that finds nothing is one ZRANGEBYSCORE on an empty queue (the `poll` script, of a
node with no queue).

FeaturedFloor, the same plus, for each feature this scheduler keeps exact at every change,
the one least command it needs (each a commented line of its script saying which feature):
placement (the least-loaded node, whether it is live, what a job holds on it), the listings
by status and by node, the snapshot's changed set, the dashboard's minute counts, the
long-polls' wake-ups, cancel notices on a poll and a heartbeat, a node's capacity, the
timeout sweep's deadlines and the attempt history. The rule: one least command per feature,
nothing our scripts merely happen to do (the outbox, records kept in two parts, trims, the
library's checks are not in it). Commands a call:

                    create  poll  running  done  a life  heartbeat  empty poll
    Floor              4      2      4       5     15        2          1
    FeaturedFloor     12      4     10      15     41        4          2

The keys are the benchmark's own, under a hash tag of each floor's ({floor}, {featured}; the
HTTP floors of floor_app.py under the same tags with `:http` after them), not the scheduler's
layout (scheduler/store/keys.py): a floor must not move when that layout does. The scripts
are plain text, not scheduler Script objects, whose assembly prepends the scripts' library:
a floor is the least a life needs, not what our scripts carry. Tight runs a floor from a
tight Python loop over one connection (life_cost.py's "floor" and "featured"); floor_app.py
serves the same scripts one per HTTP request.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import redis

# Each record the floor writes is 300 bytes, about what a small job's record is.
RECORD_BYTES = 300
EVENT = b'{"job_id":"job-0","status":"done","exit_code":0,"node_id":"floor-node"}'
ATTEMPT = b'{"attempt":1,"node_id":"floor-node","exit_code":0,"status":"done"}'
FAR_FUTURE = 4_102_444_800  # 2100-01-01: the featured floor's node is live all along
CAPACITY = 4  # the jobs the featured floor's node may run at once
TIMEOUT_SECS = 3600  # a running job's deadline, from now

SETUP = """
redis.call('HSET', KEYS[1] .. ':nodes', ARGV[1], ARGV[2])
"""

CREATE = """
local root = KEYS[1]
local n = redis.call('INCR', root .. ':seq')
local id = 'job-' .. n
redis.call('SET', root .. ':job:' .. id, ARGV[1])
redis.call('ZADD', root .. ':jobs', n, id)
redis.call('ZADD', root .. ':queue:' .. ARGV[2], n, id)
return id
"""

POLL = """
local root = KEYS[1]
local ids = redis.call('ZRANGEBYSCORE', root .. ':queue:' .. ARGV[1], '-inf', '+inf', 'LIMIT', 0, 1)
if #ids == 0 then return false end
return {ids[1], redis.call('GET', root .. ':job:' .. ids[1])}
"""

RUNNING = """
local root, id = KEYS[1], ARGV[1]
local key = root .. ':job:' .. id
if not redis.call('GET', key) then return false end
redis.call('SET', key, ARGV[3])
redis.call('ZREM', root .. ':queue:' .. ARGV[2], id)
redis.call('ZADD', root .. ':running', ARGV[4], id)
return 1
"""

DONE = """
local root, id = KEYS[1], ARGV[1]
local key = root .. ':job:' .. id
if not redis.call('GET', key) then return false end
redis.call('SET', key, ARGV[2])
redis.call('ZREM', root .. ':running', id)
redis.call('ZADD', root .. ':finished', ARGV[3], id)
redis.call('RPUSH', root .. ':events', ARGV[4])
return 1
"""

HEARTBEAT = """
local root = KEYS[1]
local node = redis.call('HGET', root .. ':nodes', ARGV[1])
if not node then return false end
redis.call('ZADD', root .. ':seen', ARGV[2], ARGV[1])
return node
"""

FEATURED_SETUP = """
local root = KEYS[1]
redis.call('HSET', root .. ':nodes', ARGV[1], ARGV[2])
redis.call('ZADD', root .. ':nodes:load', 'NX', 0, ARGV[1])
redis.call('ZADD', root .. ':nodes:compute', ARGV[3], ARGV[1])
"""

FEATURED_CREATE = """
local root, now = KEYS[1], tonumber(ARGV[2])
-- placement: the least-loaded node
local least = redis.call('ZRANGE', root .. ':nodes:load', 0, 0, 'WITHSCORES')
local node = least[1]
-- placement: is it live
local live = redis.call('ZSCORE', root .. ':nodes:compute', node)
if not live or tonumber(live) < now then return false end
local n = redis.call('INCR', root .. ':seq')
local id = 'job-' .. n
redis.call('SET', root .. ':job:' .. id, ARGV[1])
redis.call('ZADD', root .. ':jobs', n, id)
redis.call('ZADD', root .. ':queue:' .. node, n, id)
-- placement: what the job holds on its node
redis.call('ZINCRBY', root .. ':nodes:load', 1, node)
-- the listing by status
redis.call('ZADD', root .. ':status:pending', n, id)
-- the listing by node
redis.call('ZADD', root .. ':node:' .. node .. ':jobs', n, id)
-- the snapshot: what changed since the last
redis.call('SADD', root .. ':changed', id)
-- the dashboard: the minute's submissions
redis.call('HINCRBY', root .. ':series:' .. ARGV[3], 'submitted', 1)
-- long-polls: wake the node's
redis.call('PUBLISH', root .. ':wake:node:' .. node, '')
return {id, node}
"""

FEATURED_POLL = """
local root, node = KEYS[1], ARGV[1]
-- cancel notices: the node's jobs being cancelled, in every poll's answer
local cancels = redis.call('ZRANGE', root .. ':node:' .. node .. ':cancelling', 0, 99)
local ids = redis.call('ZRANGEBYSCORE', root .. ':queue:' .. node, '-inf', '+inf', 'LIMIT', 0, 1)
if #ids == 0 then return {cancels} end
-- capacity: the jobs the node runs
if redis.call('ZCARD', root .. ':node:' .. node .. ':running') >= tonumber(ARGV[2]) then
  return {cancels}
end
return {cancels, ids[1], redis.call('GET', root .. ':job:' .. ids[1])}
"""

FEATURED_RUNNING = """
local root, id, node = KEYS[1], ARGV[1], ARGV[2]
local key = root .. ':job:' .. id
if not redis.call('GET', key) then return false end
redis.call('SET', key, ARGV[3])
redis.call('ZREM', root .. ':queue:' .. node, id)
redis.call('ZADD', root .. ':node:' .. node .. ':running', ARGV[4], id)
-- the listing by status
redis.call('ZREM', root .. ':status:pending', id)
redis.call('ZADD', root .. ':status:running', ARGV[4], id)
-- the timeout sweep
redis.call('ZADD', root .. ':deadlines', ARGV[5], id)
-- the snapshot
redis.call('SADD', root .. ':changed', id)
-- the dashboard: the minute's waits, by bucket
redis.call('HINCRBY', root .. ':series:' .. ARGV[6], 'wait:0', 1)
-- long-polls: wake the job's watchers
redis.call('PUBLISH', root .. ':wake:job:' .. id, '')
return 1
"""

FEATURED_DONE = """
local root, id, node = KEYS[1], ARGV[1], ARGV[2]
local key = root .. ':job:' .. id
if not redis.call('GET', key) then return false end
redis.call('SET', key, ARGV[3])
redis.call('ZREM', root .. ':node:' .. node .. ':running', id)
redis.call('ZADD', root .. ':finished', ARGV[4], id)
redis.call('RPUSH', root .. ':events', ARGV[5])
-- the listing by status
redis.call('ZREM', root .. ':status:running', id)
redis.call('ZADD', root .. ':status:done', ARGV[4], id)
-- the listing by node and status
redis.call('ZADD', root .. ':node:' .. node .. ':done', ARGV[4], id)
-- the timeout sweep
redis.call('ZREM', root .. ':deadlines', id)
-- placement: the node's load released
redis.call('ZINCRBY', root .. ':nodes:load', -1, node)
-- the attempt history
redis.call('RPUSH', root .. ':attempts:' .. id, ARGV[6])
-- the snapshot
redis.call('SADD', root .. ':changed', id)
-- the dashboard: the minute's ends
redis.call('HINCRBY', root .. ':series:' .. ARGV[7], 'done', 1)
-- long-polls: wake the node's and the job's
redis.call('PUBLISH', root .. ':wake:node:' .. node, '')
redis.call('PUBLISH', root .. ':wake:job:' .. id, '')
return 1
"""

FEATURED_HEARTBEAT = """
local root = KEYS[1]
local node = redis.call('HGET', root .. ':nodes', ARGV[1])
if not node then return false end
redis.call('ZADD', root .. ':seen', ARGV[2], ARGV[1])
-- liveness: heard from after a silence?
local live = redis.call('ZSCORE', root .. ':nodes:compute', ARGV[1])
-- cancel notices: the answer carries them
local cancels = redis.call('ZRANGE', root .. ':node:' .. ARGV[1] .. ':cancelling', 0, 99)
return {node, live, cancels}
"""

Args = list[Any]


def record(status: str) -> bytes:
    """A job's record in `status`, padded to RECORD_BYTES."""
    head = b'{"command":"echo hi","status":"' + status.encode() + b'","pad":"'
    return head + b"x" * (RECORD_BYTES - len(head) - 2) + b'"}'


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Floor:
    """The issue's floor: its scripts, each call's arguments (after the one key, the root)
    and what its answers mean."""

    ROOT: ClassVar[str] = "{floor}"
    SCRIPTS: ClassVar[dict[str, str]] = {
        "setup": SETUP,
        "create": CREATE,
        "poll": POLL,
        "running": RUNNING,
        "done": DONE,
        "heartbeat": HEARTBEAT,
    }

    def __init__(self, suffix: str = "", node: str = "floor-node") -> None:
        self.root = self.ROOT + suffix
        self.node = node
        self.idle_node = "floor-idle-node"
        self.records = {status: record(status) for status in ("pending", "running", "done")}

    def setup_args(self) -> Args:
        return [self.node, record("node")]

    def create_args(self, now: float) -> Args:
        return [self.records["pending"], self.node]

    def created(self, answer: Any) -> tuple[str, str]:
        """The job's id and its node."""
        return text(answer), self.node

    def poll_args(self, node: str) -> Args:
        return [node]

    def found(self, answer: Any) -> str | None:
        """The id of the job a poll found, if any."""
        return None if answer is None else text(answer[0])

    def running_args(self, job_id: str, node: str, now: float) -> Args:
        return [job_id, node, self.records["running"], now]

    def done_args(self, job_id: str, node: str, now: float) -> Args:
        return [job_id, self.records["done"], now, EVENT]

    def heartbeat_args(self, node: str, now: float) -> Args:
        return [node, now]


class FeaturedFloor(Floor):
    """The issue's floor plus one least command for each feature kept exact at every change."""

    ROOT: ClassVar[str] = "{featured}"
    SCRIPTS: ClassVar[dict[str, str]] = {
        "setup": FEATURED_SETUP,
        "create": FEATURED_CREATE,
        "poll": FEATURED_POLL,
        "running": FEATURED_RUNNING,
        "done": FEATURED_DONE,
        "heartbeat": FEATURED_HEARTBEAT,
    }

    def setup_args(self) -> Args:
        return [self.node, record("node"), FAR_FUTURE]

    def create_args(self, now: float) -> Args:
        return [self.records["pending"], now, int(now // 60)]

    def created(self, answer: Any) -> tuple[str, str]:
        if not answer:
            raise RuntimeError("the featured floor found no live node")
        return text(answer[0]), text(answer[1])

    def poll_args(self, node: str) -> Args:
        return [node, CAPACITY]

    def found(self, answer: Any) -> str | None:
        return text(answer[1]) if len(answer) > 1 else None

    def running_args(self, job_id: str, node: str, now: float) -> Args:
        return [job_id, node, self.records["running"], now, now + TIMEOUT_SECS, int(now // 60)]

    def done_args(self, job_id: str, node: str, now: float) -> Args:
        return [job_id, node, self.records["done"], now, EVENT, ATTEMPT, int(now // 60)]


FLOORS: dict[str, type[Floor]] = {"floor": Floor, "featured": FeaturedFloor}


class Tight:
    """A floor's calls from a tight loop, against one Redis, on one connection."""

    def __init__(self, floor: Floor, url: str) -> None:
        self.floor = floor
        self.client = redis.Redis.from_url(url, single_connection_client=True)
        self.sha = {name: self.client.script_load(s) for name, s in floor.SCRIPTS.items()}
        self.call("setup", *floor.setup_args())

    def call(self, name: str, *args: Any) -> Any:
        return self.client.evalsha(self.sha[name], 1, self.floor.root, *args)

    def lives(self, count: int) -> None:
        call, floor = self.call, self.floor
        for _ in range(count):
            job_id, node = floor.created(call("create", *floor.create_args(time.time())))
            found = floor.found(call("poll", *floor.poll_args(node)))
            if found != job_id:
                raise RuntimeError(f"the floor's poll found {found!r}, not {job_id!r}")
            call("running", *floor.running_args(job_id, node, time.time()))
            call("done", *floor.done_args(job_id, node, time.time()))

    def heartbeats(self, count: int) -> None:
        floor = self.floor
        for _ in range(count):
            if not self.call("heartbeat", *floor.heartbeat_args(floor.node, time.time())):
                raise RuntimeError("the floor's heartbeat found no node")

    def polls(self, count: int) -> None:
        floor = self.floor
        for _ in range(count):
            if floor.found(self.call("poll", *floor.poll_args(floor.idle_node))) is not None:
                raise RuntimeError("the floor's idle poll found a job")

    def close(self) -> None:
        self.client.close()

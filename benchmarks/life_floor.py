"""The floor of life_cost.py: the least Redis work a job's life, a heartbeat and a poll need,
as plain Lua scripts run by EVALSHA over one redis-py connection, one call per round trip (as
the API makes one per request).

A life is four scripts, the issue's list exactly:
  create   INCR the id, SET a 300-byte record, ZADD two indexes (every job; the node's queue)
  poll     ZRANGEBYSCORE the node's queue for one id, GET its record
  running  GET the record, SET it, ZREM it from the queue, ZADD it to the running index
  done     GET, SET, ZREM from running, ZADD to the finished index, RPUSH an event

A heartbeat is one script: HGET the node's record (a heartbeat of an unknown node is refused,
and the answer is the node) and ZADD its last-seen time (what placement reads for liveness).
A poll that finds nothing is one ZRANGEBYSCORE on an empty queue (the `poll` script, of a
node with no queue).

The keys are the benchmark's own, under the hash tag {floor}, not the scheduler's layout
(scheduler/store/keys.py): the floor must not move when that layout does. The scripts are
plain text, not scheduler Script objects, whose assembly prepends the scripts' library: the
floor is the least a life needs, not what our scripts carry.
"""

from __future__ import annotations

import time

import redis

ROOT_KEY = "{floor}"
# Each record the floor writes is 300 bytes, about what a small job's record is.
RECORD_BYTES = 300
EVENT = b'{"job_id":"job-0","status":"done","exit_code":0,"node_id":"floor-node"}'

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


def record(status: str) -> bytes:
    """A job's record in `status`, padded to RECORD_BYTES."""
    head = b'{"command":"echo hi","status":"' + status.encode() + b'","pad":"'
    return head + b"x" * (RECORD_BYTES - len(head) - 2) + b'"}'


class Floor:
    """The floor's calls against one Redis, on one connection."""

    def __init__(self, url: str, node: str = "floor-node") -> None:
        self.client = redis.Redis.from_url(url, single_connection_client=True)
        self.node = node
        self.idle_node = "floor-idle-node"
        self.records = {status: record(status) for status in ("pending", "running", "done")}
        self.sha = {
            name: self.client.script_load(text)
            for name, text in (
                ("create", CREATE),
                ("poll", POLL),
                ("running", RUNNING),
                ("done", DONE),
                ("heartbeat", HEARTBEAT),
            )
        }
        self.client.hset(f"{ROOT_KEY}:nodes", node, record("node"))

    def lives(self, count: int) -> None:
        run, sha, records = self.client.evalsha, self.sha, self.records
        for _ in range(count):
            job_id = run(sha["create"], 1, ROOT_KEY, records["pending"], self.node)
            found = run(sha["poll"], 1, ROOT_KEY, self.node)
            if not found or found[0] != job_id:
                raise RuntimeError(f"the floor's poll found {found!r}, not {job_id!r}")
            now = time.time()
            run(sha["running"], 1, ROOT_KEY, job_id, self.node, records["running"], now)
            run(sha["done"], 1, ROOT_KEY, job_id, records["done"], now, EVENT)

    def heartbeats(self, count: int) -> None:
        for _ in range(count):
            if not self.client.evalsha(self.sha["heartbeat"], 1, ROOT_KEY, self.node, time.time()):
                raise RuntimeError("the floor's heartbeat found no node")

    def polls(self, count: int) -> None:
        for _ in range(count):
            if self.client.evalsha(self.sha["poll"], 1, ROOT_KEY, self.idle_node) is not None:
                raise RuntimeError("the floor's idle poll found a job")

    def close(self) -> None:
        self.client.close()

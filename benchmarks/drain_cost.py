"""How long one drain holds Redis (docs/GUIDE.md, Drain): DRAIN_NODE on a node with N pending jobs,
which it places on the other live nodes (placement: the least loaded that fits), up to 1000
a call (the rest stay for a drain again), and the drain of a node with nothing queued.
With --cpus C each job asks C cpus, which only the drained node offers (the others offer
1): each is left unplaced, its reason found. Redis' own time per call (INFO commandstats),
so the machine's load moves it little.

    .venv/bin/python -m benchmarks.drain_cost [--queued 1000 5000] [--nodes 10] [--cpus 2]

Starts its own redis-server.
"""

from __future__ import annotations

import argparse
import time

import msgspec
import redis

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import evalsha_many, evalsha_usec
from scheduler.models.registry import Node
from scheduler.nodes.placement import Placement
from scheduler.store.keys import Keys
from scheduler.store.scripts import drains as drain_scripts
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts import nodes as node_scripts
from scheduler.store.scripts.retry import RetryPolicy

BODY = b'{"command":"echo hello","env_vars":{"GREETING":"hi"},"status":"pending","retry_count":0,"created_at":"2026-01-01T00:00:00.000000Z"}'  # noqa: E501
LIMIT = 1000  # the API's moves per call (store/ops/nodes.py DELETE_MOVES)


def setup(client: redis.Redis, keys: Keys, nodes: int, queued: int, cpus: int, now: float) -> None:
    """`nodes` registered (so placement indexes them: room.lua index_node), n0 offering 1024
    cpus and the others 1 when jobs ask (`cpus`), and `queued` jobs pending on n0."""
    client.flushall()
    client.set(keys.initialised, "benchmark")
    who = node_scripts.Registration("key", "open", False, 100_000, 30.0, RetryPolicy(1, 0, 3600))
    for n in range(nodes):
        offer = 0 if not cpus else 1024 if n == 0 else 1
        node = Node(id=f"n{n}", hostname=f"h{n}", cpu_count=offer, role="compute")
        call = node_scripts.register_node(
            f"n{n}", msgspec.json.encode(node), "compute", now, who, f"t{n}", LIMIT
        )
        call.parse(client.eval(call.script.text, 1, keys.root, *call.args))
    record, asks = BODY, {}
    if cpus:  # the record says what the job asks, as a submit's does
        record = BODY[:-1] + b',"cpus":%d}' % cpus
        asks = {"asks": job_scripts.Asks(cpus=cpus)}
    on_n0 = Placement.fixed("n0")
    creates = [job_scripts.create_job(record, on_n0, now, 30, **asks).args for _ in range(queued)]
    evalsha_many(client, keys.root, job_scripts.CREATE_JOB.text, creates)


def drain_ms(client: redis.Redis, keys: Keys, now: float) -> tuple[float, int, int, int]:
    """Redis' time for one drain of n0 (ms), the jobs it moved to other nodes, those it left
    unplaced and those that stayed."""
    call = drain_scripts.drain_node("n0", "operator", "key", False, now, 30, LIMIT)
    client.script_load(call.script.text)
    client.config_resetstat()
    [reply] = evalsha_many(client, keys.root, call.script.text, [call.args])
    done = call.parse(reply)
    return evalsha_usec(client) / 1000, len(done.moved) - done.unplaced, done.unplaced, done.stayed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, nargs="+", default=[0, 100, 1000, 5000])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--cpus", type=int, default=0, help="what each job asks (0: nothing)")
    args = parser.parse_args()
    keys = Keys("drain")
    now = time.time()
    table = Table(
        Column("drain", "8.2f", "ms in Redis"),
        Column("moved", "28s"),
        Column("a drain again", "6.2f", "ms"),
        Column("left", "10s"),
        label_width=26,
    )
    with harness.redis_server() as url, harness.connected(url) as client:
        for queued in args.queued:
            setup(client, keys, args.nodes, queued, args.cpus, now)
            ms, moved, unplaced, stayed = drain_ms(client, keys, now)
            again, _, _, left = drain_ms(client, keys, now)
            what = f"{moved} moved, {unplaced} unplaced, {stayed} stayed"
            table.row(f"{queued:6d} queued on the node:", ms, what, again, f"{left} stayed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

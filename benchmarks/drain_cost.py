"""How long one drain holds Redis (docs/GUIDE.md, Drain): DRAIN_NODE on a node with N pending jobs,
which it places on the other live nodes (placement: the least loaded that fits), up to 1000
a call (the rest stay for a drain again), and the drain of a node with nothing queued.
With --cpus C each job asks C cpus, which only the drained node offers (the others offer
1): each is left unplaced, its reason found. Redis' own time per call (INFO commandstats),
so the machine's load moves it little.

    .venv/bin/python benchmarks/drain_cost.py [--queued 1000 5000] [--nodes 10] [--cpus 2]

Starts its own redis-server.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import msgspec
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))

from scheduler.models.registry import Node  # noqa: E402
from scheduler.nodes.placement import Placement  # noqa: E402
from scheduler.store.keys import Keys  # noqa: E402
from scheduler.store.scripts import drains as drain_scripts  # noqa: E402
from scheduler.store.scripts import jobs as job_scripts  # noqa: E402
from scheduler.store.scripts import nodes as node_scripts  # noqa: E402
from scheduler.store.scripts.retry import RetryPolicy  # noqa: E402
from tests.redis_server import redis_server  # noqa: E402

BODY = b'{"command":"echo hello","env_vars":{"GREETING":"hi"},"status":"pending","retry_count":0,"created_at":"2026-01-01T00:00:00.000000Z"}'  # noqa: E501
LIMIT = 1000  # the API's moves per call (store/jobs.py DELETE_MOVES)


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
    sha = client.script_load(job_scripts.CREATE_JOB.text)
    on_n0 = Placement.fixed("n0")
    for start in range(0, queued, 1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(start, min(queued, start + 1000)):
            call = job_scripts.create_job(record, on_n0, now, 30, **asks)
            pipe.evalsha(sha, 1, keys.root, *call.args)
        pipe.execute()


def drain_ms(client: redis.Redis, keys: Keys, now: float) -> tuple[float, int, int, int]:
    """Redis' time for one drain of n0 (ms), the jobs it moved to other nodes, those it left
    unplaced and those that stayed."""
    call = drain_scripts.drain_node("n0", "operator", "key", False, now, 30, LIMIT)
    sha = client.script_load(call.script.text)
    client.config_resetstat()
    reply = client.evalsha(sha, 1, keys.root, *call.args)
    done = call.parse(reply)
    usec = float(client.info("commandstats")["cmdstat_evalsha"]["usec"])
    return usec / 1000, len(done.moved) - done.unplaced, done.unplaced, done.stayed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, nargs="+", default=[0, 100, 1000, 5000])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--cpus", type=int, default=0, help="what each job asks (0: nothing)")
    args = parser.parse_args()
    keys = Keys("drain")
    now = time.time()
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        for queued in args.queued:
            setup(client, keys, args.nodes, queued, args.cpus, now)
            ms, moved, unplaced, stayed = drain_ms(client, keys, now)
            again, _, _, left = drain_ms(client, keys, now)
            print(
                f"{queued:6d} queued on the node: {ms:8.2f} ms in Redis, {moved} moved, "
                f"{unplaced} unplaced, {stayed} stayed; a drain again {again:6.2f} ms "
                f"({left} stayed)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

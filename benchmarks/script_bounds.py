"""The longest single script call of each worst case the API accepts (issue 36: no script over
about 10 ms whatever a user built), and the time until its work is complete; with --against
REF, the version REF beside this one.

    .venv/bin/python -m benchmarks.script_bounds [--scale 1] [--against REF] [--only NAME,...]

Each scenario is built on a fresh redis-server of its own (free loopback port, no
persistence) through the store's scripts, as the API and the workers call them, then its
action runs and is measured:
  graph cancel    a root and 5 layers of 1000 jobs, each `after` 100 of the layer before;
                  DELETE of the root (the issue's 16 s call)
  graph failed    the same graph; the root's own failed report (no retry left)
  chain cancel    a chain of 10 000 jobs, each `after` the one before; DELETE of its root
  large waiters   a root and 1000 jobs after it, each with the largest node_selector the API
                  takes (a record of ~66 KB); DELETE of the root
  large retry     1000 such jobs, cancelled: POST /jobs/retry of all of them
  large drain     POST /nodes/{id}/drain of a node with 1000 such jobs pending (a node with
                  the labels they ask beside it)
  large promote   1000 such delayed jobs come due
  large sweep     500 such running jobs past JOB_TIMEOUT_SECS
  large prune     1000 such jobs cancelled and snapshotted, past JOB_RETENTION_SECS
  bulk retry      1000 failed jobs, each `after` the same 100 pending ones: POST /jobs/retry
                  of all of them
  retry crowded   a job 1000 others wait for, and 1000 failed ones after it: their retry
                  would make 2000 wait for it (MAX_WAITERS is 1000)
  drain           POST /nodes/{id}/drain of a node with 1000 pending jobs (10 nodes, all live)
  delete node     DELETE /nodes/{id} of a node with 1000 pending jobs (the sweep moves the
                  rest)
  create after    POST /jobs of a job `after` 100 pending ones (the worst of 10)
  ui search       the UI's search through 5000 jobs of 2 KiB commands, none matching
  sweep timeouts  500 running jobs past JOB_TIMEOUT_SECS, each waited for by 10 jobs
  promote due     500 delayed jobs come due
  restore rebuild after a restore, the counts of 1000 jobs each waiting for 100 (and the
                  endings left to settle from before dropped)
  restore         the restore of 3000 jobs of 2 KiB commands from the snapshot into an empty
                  Redis (its longest call from SLOWLOG: 0 when none took 1 ms)
Per scenario: the longest single call in Redis (INFO commandstats around each script call
of the action) and the median one, the calls it took, their Redis time in all, and the
wall time from the action's start until its work is complete (for this version, the
endings left to settle settled as the workers' task settles them,
ops.upkeep.settle_endings), and what the scenario checks at the end. --scale shrinks
every size (tests/test_benchmarks.py runs it tiny).

--against REF: REF's code is checked out in a temporary directory (harness.checkout) and this
module runs as a child process with that checkout first on its path, so the same scenarios
drive REF's scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from typing import Any

import msgspec

from benchmarks import harness
from benchmarks.report import Column, Table
from scheduler.config import Settings
from scheduler.models.job import MAX_WAITERS, JobCreate, JobUpdate, new_job, stamped
from scheduler.models.registry import Node
from scheduler.nodes.placement import Placement
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store.keys import Keys
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts import listing
from scheduler.store.scripts import nodes as node_scripts
from scheduler.store.scripts.retry import RetryPolicy, retry_jobs
from scheduler.store.sync_store import SyncJobStore

try:  # the calls this version sends in pieces; REF may have none
    from scheduler.store import pieces
except ImportError:
    pieces = None  # type: ignore[assignment]
try:  # store operations, declared once (issue 37); REF may run them as store methods
    from scheduler.store import ops
    from scheduler.store.operation import Home, Op
except ImportError:
    ops = None  # type: ignore[assignment]


def run_op(store: SyncJobStore, module: str, name: str, *args: Any) -> Any:
    """The store operation `module.name`, as this version runs it."""
    if ops is None:
        return getattr(store, name)(*args)
    return store.run(getattr(getattr(ops, module), name)(*args))


PREFIX = "bounds"
NO_RETRY = RetryPolicy(0, 0, 3600)


class Measured:
    """Every script call of a store timed in Redis (the FCALL's usec in INFO commandstats)."""

    def __init__(self, store: SyncJobStore) -> None:
        self.store, self.usec, self.on = store, [], False
        self.since = 0.0
        self.counted: tuple[int, int] | None = None  # (calls, usec), when not from `usec`
        run = store.run

        def timed(call: Any) -> Any:
            if not self.on:
                return run(call)
            before = self._fcall_usec()
            reply = run(call)
            self.usec.append(self._fcall_usec() - before)
            return reply

        store.run = timed  # type: ignore[method-assign]

    def begin(self) -> None:
        """The action starts: its calls are timed, and the wall time from now."""
        self.on, self.usec, self.since = True, [], time.monotonic()

    def _fcall_usec(self) -> int:
        stats = self.store.redis.info("commandstats")
        return int(stats.get("cmdstat_fcall", {}).get("usec", 0))


class Builder:
    """Jobs made through the create script, as POST /jobs makes them (on node n0)."""

    def __init__(self, store: SyncJobStore) -> None:
        self.store = store
        self.placement = Placement.fixed("n0")

    def job(self, after: list[str] | None = None, command: str = "true", **fields: Any) -> str:
        body, now = JobCreate(command=command, after=after or [], **fields), time.time()
        job = stamped(new_job(body), body, now)
        made = run_op(self.store, "jobs", "create", job, self.placement, now)
        return str(json.loads(made.job)["job_id"])

    def layers(self, root: str, count: int, width: int, fan: int) -> list[str]:
        made, before = [], [root]
        for _ in range(count):
            layer = [
                self.job([before[(i + j) % len(before)] for j in range(min(fan, len(before)))])
                for i in range(width)
            ]
            made += layer
            before = layer
        return made


def settle(store: SyncJobStore) -> None:
    """This version's endings left to settle, as the workers' task settles them."""
    if ops is not None:
        store.run(ops.upkeep.settle_endings())
    elif hasattr(store, "settle_endings"):  # a REF from before store operations
        store.settle_endings()


def cancel(store: SyncJobStore, job_id: str) -> None:
    store.run(job_scripts.cancel_job(job_id, time.time()))


def report(store: SyncJobStore, job_id: str, status: str) -> None:
    update = JobUpdate(status=status, exit_code=None if status == "running" else 1)
    store.run(job_scripts.transition(job_id, update, time.time(), NO_RETRY, "key", 3600))


def retry_all(store: SyncJobStore, ids: list[str]) -> list[Any]:
    """POST /jobs/retry as the API's store sends it: again with the ids a call left."""
    done: list[Any] = []
    while len(done) < len(ids):
        done += store.run(retry_jobs(ids[len(done) :], Placement.fixed("n0"), time.time(), 3600))
    return done


def count(store: SyncJobStore, status: str) -> int:
    return int(store.redis.zcard(Keys(PREFIX).status(status)))


Scenario = Callable[[SyncJobStore, Builder, Measured, float], str]


def graph(store: SyncJobStore, make: Builder, measured: Measured, scale: float, end: str) -> str:
    width, fan = max(2, round(1000 * scale)), max(1, round(100 * scale))
    root = make.job()
    made = make.layers(root, 5, width, fan)
    if end == "failed":
        report(store, root, "running")
        measured.begin()
        report(store, root, "failed")
    else:
        measured.begin()
        cancel(store, root)
    settle(store)
    failed = count(store, "failed")
    return f"{failed} of {len(made) + 1} failed"


def chain(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    root = last = make.job()
    for _ in range(max(3, round(10_000 * scale))):
        last = make.job([last])
    measured.begin()
    cancel(store, root)
    settle(store)
    return f"last link {json.loads(store.redis.get(Keys(PREFIX).job(last)))['status']}"


# The largest node_selector the API takes (models/labels.py): 16 keys of 16 values of 255.
LARGE_SELECTOR = {
    f"k{k:02d}": [f"{k:02d}{v:02d}" + "v" * 251 for v in range(16)] for k in range(16)
}


def large_waiters(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    root = make.job()
    made = [
        make.job([root], node_selector=LARGE_SELECTOR) for _ in range(max(2, round(1000 * scale)))
    ]
    measured.begin()
    cancel(store, root)
    settle(store)
    return f"{count(store, 'failed')} of {len(made) + 1} failed"


def large_retry(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    made = [make.job(node_selector=LARGE_SELECTOR) for _ in range(max(2, round(1000 * scale)))]
    for job_id in made:
        cancel(store, job_id)
    measured.begin()
    retried = retry_all(store, made)
    return f"{sum(1 for r in retried if r.code == 1)} of {len(made)} pending again"


# Registrations as the operator's key makes them.
BY_KEY = node_scripts.Registration("key", "open", False, 100_000, 3600.0, NO_RETRY)


def register_node(store: SyncJobStore, node: Node, now: float) -> None:
    """`node` registered with the key, its token named after its id."""
    blob = msgspec.json.encode(node)
    store.run(
        node_scripts.register_node(node.id, blob, "compute", now, BY_KEY, f"t-{node.id}", 1000)
    )


def drain_n0(store: SyncJobStore, now: float) -> Any:
    """The operator's drain of n0: one call before store/pieces.py, in its pieces since."""
    if pieces is None:
        return store.run(node_scripts.drain_node("n0", "operator", "key", False, now, 3600, 1000))
    if ops is not None:
        return store.run(ops.nodes.drain_node("n0", now, "operator", caller="key"))
    return asyncio.run(pieces.drained(_async(store), "n0", "operator", "key", False, now, 3600))


def fitting(store: SyncJobStore, node_id: str, now: float) -> None:
    """A node whose labels LARGE_SELECTOR takes, with room for 1000 jobs."""
    labels = {key: values[0] for key, values in LARGE_SELECTOR.items()}
    register_node(
        store, Node(id=node_id, hostname=node_id, cpu_count=8, role="compute", labels=labels), now
    )


def large_drain(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    now = time.time()
    fitting(store, "n0", now)
    for _ in range(max(2, round(1000 * scale))):
        make.job(node_selector=LARGE_SELECTOR)
    fitting(store, "n1", now)
    measured.begin()
    return f"{len(drain_n0(store, now).moved)} moved"


def large_promote(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    fitting(store, "n0", time.time())
    for _ in range(max(2, round(1000 * scale))):
        make.job(node_selector=LARGE_SELECTOR, delay_secs=1)
    measured.begin()
    return f"{len(run_op(store, 'upkeep', 'promote_due', time.time() + 2))} promoted"


def large_sweep(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    fitting(store, "n0", time.time())
    for job_id in [
        make.job(node_selector=LARGE_SELECTOR) for _ in range(max(2, round(500 * scale)))
    ]:
        report(store, job_id, "running")
    measured.begin()
    due = time.time() + store.settings.job_timeout_secs + 1
    timed_out = run_op(store, "upkeep", "sweep_timeouts", due)
    return f"{len(timed_out)} timed out"


def large_prune(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    for job_id in [
        make.job(node_selector=LARGE_SELECTOR) for _ in range(max(2, round(1000 * scale)))
    ]:
        cancel(store, job_id)
    assert snapshot_once(store.settings) > 0
    measured.begin()
    return f"{len(run_op(store, 'upkeep', 'prune_finished', time.time() + 10))} pruned"


def bulk_retry(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    deps = [make.job() for _ in range(max(1, round(100 * scale)))]
    waiters = [make.job(deps) for _ in range(max(2, round(1000 * scale)))]
    for waiter in waiters:
        cancel(store, waiter)
    measured.begin()
    retried = retry_all(store, waiters)
    return f"{sum(1 for r in retried if r.code == 1)} of {len(waiters)} waiting again"


def retry_crowded(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    dep = make.job()
    first = [make.job([dep]) for _ in range(max(2, round(MAX_WAITERS * scale)))]
    cancel(store, dep)
    settle(store)
    retry_all(store, [dep])
    for _ in range(max(2, round(MAX_WAITERS * scale))):
        make.job([dep])
    measured.begin()
    retry_all(store, first)
    return f"{store.redis.scard(Keys(PREFIX).dependents(dep))} wait for it"


def drain(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    now = time.time()
    register(store, now)
    for _ in range(max(2, round(1000 * scale))):
        make.job()
    measured.begin()
    return f"{len(drain_n0(store, now).moved)} moved"


def delete_node(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    now = time.time()
    register(store, now)
    for _ in range(max(2, round(1000 * scale))):
        make.job()
    measured.begin()
    step = pieces.MOVE_STEP if pieces else (ops.nodes.DELETE_MOVES if ops else 1000)
    moved = store.run(node_scripts.delete_node("n0", now, 3600, step, "key"))
    return f"{len(moved)} moved at once"


def register(store: SyncJobStore, now: float) -> None:
    """10 compute nodes, n0 to n9, each with 8 cpus."""
    for n in range(10):
        register_node(store, Node(id=f"n{n}", hostname=f"h{n}", cpu_count=8, role="compute"), now)


def wide_selector(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    """MAX_NODES compute nodes sharing a label, jobs pinned to it: each placement reads every
    node. Three placed as they are submitted (one asking more cpus than any node has, every
    node read to say why), then 100 unplaced ones by the placement pass."""
    now, wide = time.time(), {"zone": "a"}
    for _ in range(100):  # no node yet: unplaced
        body = JobCreate(command="true", node_selector=wide)
        run_op(store, "jobs", "create", stamped(new_job(body), body, now), Placement.live(), now)
    nodes = max(2, round(store.settings.max_nodes * scale))
    for n in range(nodes):
        node = Node(id=f"w{n}", hostname=f"w{n}", cpu_count=8, role="compute", labels=wide)
        register_node(store, node, now)
    measured.begin()
    placed = []
    for cpus in (0, 1, 64):
        body = JobCreate(command="true", node_selector=wide, cpus=cpus)
        job = stamped(new_job(body), body, now)
        made = run_op(store, "jobs", "create", job, Placement.live(), now)
        placed.append(json.loads(made.job)["node_id"] or "none")
    passed = len(run_op(store, "upkeep", "place_unplaced", now))
    return f"{nodes} nodes; placed on {' '.join(placed)}; the pass placed {passed}"


def restore(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    """Its calls from the slowest entries of SLOWLOG: the restore runs on its own store."""
    for i in range(max(2, round(3000 * scale))):
        make.job(command=f"echo {i} " + "x" * 2000)
    assert snapshot_once(store.settings) > 0
    store.redis.flushall()
    store.redis.config_set("slowlog-log-slower-than", 1000)
    store.redis.config_set("slowlog-max-len", 10_000)
    store.redis.slowlog_reset()
    before = store.redis.info("commandstats").get("cmdstat_fcall", {})
    measured.begin()
    restore_if_empty(store.settings)
    after = store.redis.info("commandstats").get("cmdstat_fcall", {})
    slow = [e["duration"] for e in store.redis.slowlog_get(10_000) if e["command"][:5] == b"FCALL"]
    measured.usec = slow  # those of 1 ms or more
    measured.counted = (
        after["calls"] - before.get("calls", 0),
        after["usec"] - before.get("usec", 0),
    )
    return f"{count(store, 'pending')} restored"


def create_after(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    deps = [make.job() for _ in range(max(1, round(100 * scale)))]
    measured.begin()
    for _ in range(10):
        make.job(deps)
    return f"after {len(deps)}"


def ui_search(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    for i in range(max(2, round(5000 * scale))):
        make.job(command=f"echo {i} " + "x" * 2000)
    measured.begin()
    args: tuple[Any, ...] = ("", "", 0, "no such text", 5000, 50, 32 << 20)
    if hasattr(listing, "SearchQuery"):  # its values as one query since; REF may take them apart
        query = listing.SearchQuery(listing.JobQuery("", "", 0, 50), "no such text", 5000)
        args = (query, 32 << 20)
    if pieces is None:  # one call
        found = store.run(listing.search(*args))
    elif ops is not None:
        found = store.run(Op(Home(), lambda _: pieces.searched(*args)))
    else:
        found = asyncio.run(pieces.searched(_async(store), *args))
    return f"{found.looked} looked at, {len(found.jobs)} found"


def _async(store: SyncJobStore) -> Callable[[Any], Any]:
    async def run(call: Any) -> Any:
        return store.run(call)

    return run


def sweep_timeouts(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    running = [make.job() for _ in range(max(2, round(500 * scale)))]
    for job_id in running:
        report(store, job_id, "running")
        for _ in range(10):
            make.job([job_id])
    measured.begin()
    due = time.time() + store.settings.job_timeout_secs + 1
    timed_out = run_op(store, "upkeep", "sweep_timeouts", due)
    settle(store)
    return f"{len(timed_out)} timed out, {count(store, 'failed')} failed"


def promote_due(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    for _ in range(max(2, round(500 * scale))):
        make.job(delay_secs=1)
    measured.begin()
    promoted = run_op(store, "upkeep", "promote_due", time.time() + 2)
    return f"{len(promoted)} promoted"


def restore_rebuild(store: SyncJobStore, make: Builder, measured: Measured, scale: float) -> str:
    deps = [make.job() for _ in range(max(1, round(100 * scale)))]
    waiters = [make.job(deps) for _ in range(max(2, round(1000 * scale)))]
    keys = Keys(PREFIX)
    store.redis.delete(keys.waiting, *(keys.dependents(dep) for dep in deps))
    measured.begin()
    run_op(store, "upkeep", "rebuild_waiting", time.time())
    return f"{store.redis.hlen(keys.waiting)} of {len(waiters)} waiting"


SCENARIOS: dict[str, Scenario] = {
    "graph cancel": lambda s, m, t, x: graph(s, m, t, x, "cancelled"),
    "graph failed": lambda s, m, t, x: graph(s, m, t, x, "failed"),
    "chain cancel": chain,
    "large waiters": large_waiters,
    "large retry": large_retry,
    "large drain": large_drain,
    "large promote": large_promote,
    "large sweep": large_sweep,
    "large prune": large_prune,
    "bulk retry": bulk_retry,
    "retry crowded": retry_crowded,
    "drain": drain,
    "delete node": delete_node,
    "create after": create_after,
    "ui search": ui_search,
    "sweep timeouts": sweep_timeouts,
    "promote due": promote_due,
    "restore rebuild": restore_rebuild,
    "restore": restore,
    "wide selector": wide_selector,
}


def run_scenario(name: str, scale: float) -> dict[str, Any]:
    with (
        harness.redis_server() as url,
        tempfile.TemporaryDirectory(prefix="bounds-db-") as data,
    ):
        settings = Settings.from_env(
            {}, redis_url=url, redis_prefix=PREFIX, scheduler_db=f"{data}/bounds.db",
            max_job_retries=0, max_jobs_per_node=1000, job_retention_secs=1,
        )  # fmt: skip
        store = SyncJobStore.connect(settings)
        store.redis.set(Keys(PREFIX).initialised, "benchmark")
        measured = Measured(store)
        outcome = SCENARIOS[name](store, Builder(store), measured, scale)
        usec, wall = measured.usec, time.monotonic() - measured.since
        calls, total = measured.counted or (len(usec), sum(usec))
        store.close()
    return {
        "scenario": name,
        "longest_ms": max(usec, default=0) / 1000,
        # The middle call: the longest moves with the machine's other work, this much less.
        "median_ms": sorted(usec)[len(usec) // 2] / 1000 if usec else 0,
        "calls": calls,
        "redis_ms": total / 1000,
        "until_done_ms": wall * 1000,
        "outcome": outcome,
    }


def subject(names: list[str], scale: float) -> list[dict[str, Any]]:
    return [run_scenario(name, scale) for name in names]


def against(ref: str, names: list[str], scale: float) -> list[dict[str, Any]]:
    """The same scenarios on REF's code, checked out."""
    argv = ["--json", "--scale", str(scale), "--only", ",".join(names)]
    with harness.checkout(ref) as tree:
        out = harness.run_module("script_bounds", *argv, code=tree)
    return [json.loads(line) for line in out.splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--against", default="")
    parser.add_argument("--json", action="store_true", help="one JSON line per scenario")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    if args.json:
        for result in subject(names, args.scale):
            print(json.dumps(result), flush=True)
        return 0
    before = {}
    if args.against:
        before = {r["scenario"]: r for r in against(args.against, names, args.scale)}
    version = [
        Column("longest", "8.2f", "ms"),
        Column("median", "5.2f", "ms"),
        Column("calls", "5d"),
        Column("in Redis", "9.1f", "ms"),
        Column("done in", "9.1f", "ms"),
    ]
    columns = [*version, Column("outcome", "s")]
    if args.against:
        columns += [Column(f"{args.against}: {c.title}", c.fmt, c.unit) for c in version]
        columns.append(Column(f"{args.against}: outcome", "s"))
    table = Table(*columns, label_width=16)
    table.header()
    for result in subject(names, args.scale):
        figures = ("longest_ms", "median_ms", "calls", "redis_ms", "until_done_ms", "outcome")
        cells = [result[key] for key in figures]
        old = before.get(result["scenario"])
        if old:
            cells += [old.get(key, 0) for key in figures]
        table.row(result["scenario"], *cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The background work's operations (workers/tasks.py), each a run of bounded script calls
until the work found is done: sweeps of timeouts and lost nodes, promotions, placements,
the endings left to settle, the outbox, pruning; and the upgrades and rebuilds a start runs
(snapshot/restore.py). Every one takes `now`; the workers run them on the shard they serve."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from scheduler.models.job import RETIRED_STATUSES
from scheduler.models.record import INLINE_BYTES, is_whole
from scheduler.store.keys import Keys
from scheduler.store.operation import Command, Shard, Steps, home, operation, run, send, together
from scheduler.store.scripts import Call, functions, retiring, settling, snapshot, upkeep
from scheduler.store.scripts.replies import Lost, Requeued
from scheduler.store.scripts.retry import RetryPolicy

# How long a function library stays after the last mark of a process that runs it: well
# past the marks' periods (seconds) and a rolling upgrade's minutes; and how many one sweep
# deletes at most (one FUNCTION DELETE each).
LIBRARY_GRACE_SECS, LIBRARIES_PER_SWEEP = 3600, 10

# The jobs one call of the background work handles, each call ~5 ms of Redis at most
# (benchmarks/script_bounds.py): ending a job (with its event, its attempt, its waiters'
# capture) costs about twice moving or promoting one.
ENDINGS_BATCH, MOVES_BATCH = 50, 200


def _drain(call: Callable[[], Call[upkeep.Batch]], batch: int) -> Steps[list[str]]:
    """`call()`'s script run until a run reads fewer entries than `batch`; the ids."""
    done: list[str] = []
    while True:
        swept = yield from run(call())
        done.extend(swept.ids)
        if swept.read < batch:
            return done


@operation(home)
def finish_cancels(shard: Shard, now: float, batch: int = ENDINGS_BATCH) -> Steps[list[str]]:
    """Cancel the jobs asked to stop more than CANCEL_GRACE_SECS ago whose agent has not
    reported them cancelled."""
    cutoff = now - shard.settings.cancel_grace_secs
    return (yield from _drain(lambda: upkeep.finish_cancels(cutoff, now, batch), batch))


@operation(home)
def sweep_timeouts(shard: Shard, now: float, batch: int = ENDINGS_BATCH) -> Steps[list[str]]:
    """Every run job past JOB_TIMEOUT_SECS timed out: failed, or retried under its own
    policy. `batch` per script call."""
    s = shard.settings
    policy, ttl, builtin = RetryPolicy.of(s), s.node_ttl_secs, s.builtin_registry

    def call() -> Call[upkeep.Batch]:
        return upkeep.sweep_timeouts(
            now, s.job_timeout_secs, batch, policy, node_ttl=ttl, builtin=builtin
        )

    return (yield from _drain(call, batch))


@operation(home)
def promote_due(shard: Shard, now: float, batch: int = MOVES_BATCH) -> Steps[list[str]]:
    """The delayed jobs due by `now` become pending (on a live node)."""
    ttl = shard.settings.node_ttl_secs
    return (yield from _drain(lambda: upkeep.promote_due(now, ttl, batch), batch))


@operation(home)
def place_unplaced(shard: Shard, now: float, batch: int = 200, calls: int = 10) -> Steps[list[str]]:
    """The unplaced jobs placed where a node fits now, once room may have appeared (a
    flagged pass, PLACE_UNPLACED): `batch` per script call, at most `calls` calls, so a
    tick holds Redis for bounded slices; the pass goes on at the next tick. The ids."""
    placed: list[str] = []
    for _ in range(calls):
        step = yield from run(upkeep.place_unplaced(now, shard.settings.node_ttl_secs, batch))
        placed.extend(step.ids)
        if step.read < batch:
            break
    return placed


@operation(home)
def prune_finished(shard: Shard, now: float, batch: int = MOVES_BATCH) -> Steps[list[str]]:
    """Remove from Redis the jobs finished more than JOB_RETENTION_SECS ago that the
    snapshot already holds (none when the retention is 0: keep forever)."""
    retention = shard.settings.job_retention_secs
    if not retention:
        return []
    removed: list[str] = []
    skip = 0
    while True:
        pruned = yield from run(upkeep.prune_finished(now - retention, skip, batch))
        removed.extend(pruned.ids)
        skip += pruned.kept
        if pruned.read < batch:
            return removed


@operation(home)
def requeue_lost(shard: Shard, now: float, limit: int = MOVES_BATCH) -> Steps[list[Requeued]]:
    """Move the pending jobs of nodes lost for NODE_LOST_SECS to live nodes, `limit` per
    script call at most (fewer when their records are large: life.py move_each), until a
    call moves none. Nodes are the built-in registry's, or the external registry's as
    the sweep saw them (`observe_nodes`)."""
    s, moved = shard.settings, []
    while True:
        call = upkeep.requeue_lost(
            now, s.node_lost_after, s.node_ttl_secs, limit, s.builtin_registry
        )
        batch = yield from run(call)
        moved.extend(batch)
        if not batch:
            return moved


@operation(home)
def lose_running(shard: Shard, now: float, limit: int = ENDINGS_BATCH) -> Steps[list[Lost]]:
    """The running jobs of nodes lost for NODE_LOST_SECS: run jobs fail as `node lost`
    (retried on a live node while retries are left), services are placed again. `limit`
    per script call at most (fewer when their records are large), until a call handles
    none."""
    s, lost = shard.settings, []
    while True:
        call = upkeep.lose_running(
            now, s.node_lost_after, s.node_ttl_secs, RetryPolicy.of(s), limit
        )
        batch = yield from run(call)
        lost.extend(batch)
        if not batch:
            return lost


@operation(home)
def observe_nodes(shard: Shard, node_ids: list[str], now: float) -> Steps[float]:
    """External registry: these compute nodes were seen healthy at `now` (the sweep's
    record of them, which `requeue_lost` reads as the built-in registry's heartbeats).
    Returns since when the registry has been read without a failure."""
    keys = shard.keys
    steps = [Command(("SET", keys.registry_readable_since, now, "NX"))]
    if node_ids:
        seen = [x for node_id in node_ids for x in (now, node_id)]
        steps.append(Command(("ZADD", keys.nodes_compute, *seen)))
    steps.append(Command(("GET", keys.registry_readable_since)))
    return float((yield from together(*steps))[-1])


@operation(home)
def registry_unreadable(shard: Shard) -> Steps[None]:
    """The sweep could not read the external registry: the unbroken stretch ends."""
    yield from send("DEL", shard.keys.registry_readable_since)


@operation(home)
def outbox_head(shard: Shard, limit: int) -> Steps[list[bytes]]:
    """The oldest `limit` outbox entries ("<event number> <message JSON>"), not removed."""
    entries: list[bytes] = yield from send("LRANGE", shard.keys.outbox, 0, limit - 1)
    return entries


@operation(home)
def trim_outbox(shard: Shard, handed_over: list[bytes]) -> Steps[int]:
    """Remove these entries (an `outbox_head` read, now handed to rq) from the outbox."""
    return (yield from run(upkeep.trim_outbox(handed_over))) if handed_over else 0


@operation(home)
def rebuild_waiting(shard: Shard, now: float, batch: int = 500) -> Steps[None]:
    """After a restore: the waiting jobs' counters and dependents (REBUILD_WAITING), from
    the statuses restored, which the endings left to settle from before would count
    again: those go first (CLEAR_ENDINGS)."""
    while (yield from run(settling.clear_endings(batch))) == batch:
        pass
    above, more = 0.0, True
    while more:
        more, above = yield from run(snapshot.rebuild_waiting(above, batch, now))


@operation(home)
def settle_endings(
    shard: Shard, clock: Callable[[], float] = time.time, budget_secs: float = 30.0
) -> Steps[settling.Settling]:
    """The waiters of the endings left to settle (SETTLE_ENDINGS), one bounded call after
    another, each at `clock()`, until none is left or `budget_secs` have passed (the next
    run goes on). Only a call that found an ending counts."""
    calls, deadline = 0, time.monotonic() + budget_secs
    while True:
        settled = yield from run(settling.settle_endings(clock()))
        calls += settled.units > 0
        if not settled.left or time.monotonic() > deadline:
            return settling.Settling(calls, settled.left)


@operation(home)
def upgrade_retired(shard: Shard, batch: int = 500) -> Steps[int]:
    """Change the jobs an earlier version ended with a status of its own to how they end
    now (models.RETIRED_STATUSES); returns how many. One call finding none when there
    are none, so every start can run it."""
    changed = 0
    for status, ending in RETIRED_STATUSES.items():
        while True:
            read = yield from run(snapshot.upgrade_retired(status, ending, batch))
            changed += read
            if read < batch:
                break
    return changed


def _scored(reply: list[Any]) -> list[tuple[bytes, float]]:
    """A WITHSCORES reply as (member, score) pairs: flat in RESP2, pairs already in RESP3
    (redis-py's clients may speak either)."""
    if reply and isinstance(reply[0], list | tuple):
        return [(member, float(score)) for member, score in reply]
    return [(reply[i], float(reply[i + 1])) for i in range(0, len(reply), 2)]


def _jobs_after(keys: Keys, above: str, batch: int) -> Steps[tuple[list[str], str | None]]:
    """Up to `batch` job ids by number past the bound `above` (an upgrade's walk over every
    job), and the bound past them; None when these were the last."""
    reply = yield from send(
        "ZRANGEBYSCORE", keys.all_jobs, above, "+inf", "WITHSCORES", "LIMIT", 0, batch
    )
    entries = _scored(reply)
    ids = [str(member, "utf-8") for member, _ in entries]
    return ids, f"({entries[-1][1]!r}" if len(ids) == batch else None


@operation(home)
def split_records(shard: Shard, batch: int = 500) -> Steps[int]:
    """The upgrade from the whole records of earlier versions: each record holding a part
    too large for its head put in parts (models/record.py), once (Keys.records_split
    marks it done; readers and the scripts take a whole record meanwhile). Returns how
    many were split."""
    keys = shard.keys
    if (yield from send("EXISTS", keys.records_split)):
        return 0
    split, missed = 0, 0
    above: str | None = "-inf"
    while above is not None:
        ids, above = yield from _jobs_after(keys, above, batch)
        heads = (yield from send("MGET", *[keys.job(job_id) for job_id in ids])) if ids else []
        for job_id, head in zip(ids, heads, strict=True):
            # Only a record larger than a head keeps may hold a part too large for one.
            if isinstance(head, bytes) and len(head) > INLINE_BYTES and is_whole(head):
                done = yield from run(snapshot.split_record(job_id, head))
                split, missed = split + done, missed + 1 - done
    if not missed:  # one changed while read is split at the next start
        yield from send("SET", keys.records_split, "1")
    return split


@operation(home)
def index_namespaces(shard: Shard, batch: int = 500) -> Steps[int]:
    """The upgrade to namespaces: the jobs of an earlier version put in their namespace's
    indexes (places.py BY_NAMESPACE, NAMESPACE_STATUS), once (Keys.namespaces_indexed marks
    it done; every job made or moved since the upgrade enters them by itself). Returns how
    many jobs were indexed."""
    keys = shard.keys
    if (yield from send("EXISTS", keys.namespaces_indexed)):
        return 0
    indexed = 0
    above: str | None = "-inf"
    while above is not None:
        ids, above = yield from _jobs_after(keys, above, batch)
        if ids:
            indexed += yield from run(snapshot.index_namespaces(ids))
    yield from send("SET", keys.namespaces_indexed, "1")
    return indexed


@operation(home)
def retire_libraries(shard: Shard, grace: float = LIBRARY_GRACE_SECS) -> Steps[list[str]]:
    """An old release's function library deleted once no process uses it (docs/UPGRADING.md).
    Each release's scripts are one library named after a hash of its text
    (scripts/functions.py), so two releases beside each other in a rolling upgrade each run
    their own; without this every release would leave its library (~130 KB) in Redis. Each
    process marks the library it runs in `{P}:libraries`, with Redis's time: a worker here, at
    every sweep; an API process at every flush of its request metrics. Those unmarked for
    `grace` seconds are deleted (FUNCTION DELETE, which no script may run) and forgotten;
    returns their names (or those found gone already). Deleting one a process still runs
    costs it one round trip: its next call finds the function missing and loads it again,
    as after a Redis restart, and its next mark keeps it."""
    own = functions.library().name
    retired = yield from run(retiring.retired_libraries(own, grace, LIBRARIES_PER_SWEEP))
    for name in retired.names:
        try:
            yield from send("FUNCTION", "DELETE", name)
        except ResponseError as exc:  # a library gone already: another sweep deleted it
            if "library not found" not in str(exc).lower():
                raise
    if retired.names:
        yield from run(retiring.forget_libraries(retired.now - grace, retired.names))
    return retired.names

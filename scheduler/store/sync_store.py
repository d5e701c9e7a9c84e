"""The blocking job store of the rq workers, the snapshot and the command line: owns a
redis-py client (connection/blocking.py) and runs script calls (scripts/) with it, each
against the deployment's root. The API's asyncio flavour is jobs.py."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import ResponseError

from scheduler.config import Settings
from scheduler.models.job import RETIRED_STATUSES, Job
from scheduler.models.record import INLINE_BYTES, is_whole
from scheduler.nodes.placement import Placement
from scheduler.store.connection.blocking import sync_client
from scheduler.store.connection.protocol import is_no_function
from scheduler.store.errors import ReplicasNotAcked
from scheduler.store.keys import Keys
from scheduler.store.records import STAGED_SECS, apart_keys, complete, creation
from scheduler.store.scripts import Call, functions, schedules, settling, snapshot, upkeep
from scheduler.store.scripts.jobs import NO_DEDUP, Created, Dedup
from scheduler.store.scripts.replies import Lost, Requeued
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.shards import Numbering

T = TypeVar("T")

# The jobs one call of the background work handles, each call ~5 ms of Redis at most
# (benchmarks/script_bounds.py): ending a job (with its event, its attempt, its waiters'
# capture) costs about twice moving or promoting one.
ENDINGS_BATCH, MOVES_BATCH = 50, 200


class SyncJobStore:
    """Blocking store for the rq workers and the command line."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.redis_prefix)

    @classmethod
    def connect(cls, settings: Settings) -> SyncJobStore:
        return cls(sync_client(settings), settings)

    def close(self) -> None:
        self.redis.close()

    def run(self, call: Call[T]) -> T:
        """The call as a FCALL of the scripts' function library (scripts/functions.py),
        loaded first when this Redis lacks it; with REDIS_MIN_REPLICAS_ACKED, a WAIT for
        the replicas in the same round trip (no MULTI: WAIT may not run inside one)."""
        try:
            reply = self._fcall(call)
        except ResponseError as exc:
            if not is_no_function(exc):
                raise
            self.redis.function_load(functions.library().code, replace=True)
            reply = self._fcall(call)
        return call.parse(reply)

    def _fcall(self, call: Call[T]) -> Any:
        script = call.script
        replicas, timeout_ms = script.acks(self.settings)
        if not replicas:
            return self.redis.fcall(script.function, 1, self.keys.root, *call.args)
        pipe = self.redis.pipeline(transaction=False)
        pipe.fcall(script.function, 1, self.keys.root, *call.args)
        pipe.wait(replicas, timeout_ms)
        # Not raised by execute: it rewrites an error's text ("Command # 1 ... of pipeline
        # caused error: ..."), and `run` must read a missing function's.
        reply, acked = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            raise acked
        if acked < replicas:
            raise ReplicasNotAcked(acked, replicas)
        return reply

    def create(
        self, job: Job, placement: Placement, now: float, dedup: Dedup = NO_DEDUP
    ) -> Created:
        """A new job (models.job.stamped), placed by `placement`."""
        ttl, numbering = self.settings.node_ttl_secs, Numbering.served(self.settings)
        staged, call = creation(self.keys, job, placement, now, ttl, dedup, numbering)
        # A large spec is staged: its bytes never enter the script (models/record.py).
        for key, value in staged.values.items():
            self.redis.set(key, value, ex=STAGED_SECS)
        created = self.run(call)
        if created.duplicate and created.job:
            return dataclasses.replace(created, job=self.whole([created.job])[0])
        return created

    def whole(self, heads: list[bytes]) -> list[bytes]:
        """As JobStore.whole: the records of heads a script answered."""
        places, wanted = apart_keys(self.keys, heads)
        values = self.redis.mget(wanted) if places else []
        return complete(heads, places, values)  # type: ignore[arg-type]

    def finish_cancels(self, now: float, batch: int = ENDINGS_BATCH) -> list[str]:
        """Cancel the jobs asked to stop more than CANCEL_GRACE_SECS ago whose agent has not
        reported them cancelled."""
        cutoff = now - self.settings.cancel_grace_secs
        return self._drain(lambda: upkeep.finish_cancels(cutoff, now, batch), batch)

    def rebuild_waiting(self, now: float, batch: int = 500) -> None:
        """After a restore: the waiting jobs' counters and dependents (REBUILD_WAITING), from
        the statuses restored, which the endings left to settle from before would count
        again: those go first (CLEAR_ENDINGS)."""
        while self.run(settling.clear_endings(batch)) == batch:
            pass
        above, more = 0.0, True
        while more:
            more, above = self.run(snapshot.rebuild_waiting(above, batch, now))

    def settle_endings(
        self, clock: Callable[[], float] = time.time, budget_secs: float = 30.0
    ) -> settling.Settling:
        """The waiters of the endings left to settle (SETTLE_ENDINGS), one bounded call after
        another, each at `clock()`, until none is left or `budget_secs` have passed (the next
        run goes on). Only a call that found an ending counts."""
        calls, deadline = 0, time.monotonic() + budget_secs
        while True:
            settled = self.run(settling.settle_endings(clock()))
            calls += settled.units > 0
            if not settled.left or time.monotonic() > deadline:
                return settling.Settling(calls, settled.left)

    def upgrade_retired(self, batch: int = 500) -> int:
        """Change the jobs an earlier version ended with a status of its own to how they end
        now (models.RETIRED_STATUSES); returns how many. One call finding none when there
        are none, so every start can run it."""
        changed = 0
        for status, ending in RETIRED_STATUSES.items():
            while True:
                read = self.run(snapshot.upgrade_retired(status, ending, batch))
                changed += read
                if read < batch:
                    break
        return changed

    def split_records(self, batch: int = 500) -> int:
        """The upgrade from the whole records of earlier versions: each record holding a part
        too large for its head put in parts (models/record.py), once (Keys.records_split
        marks it done; readers and the scripts take a whole record meanwhile). Returns how
        many were split."""
        if self.redis.exists(self.keys.records_split):
            return 0
        split, missed, above = 0, 0, "-inf"
        while True:
            entries: list[tuple[bytes, float]] = self.redis.zrangebyscore(  # type: ignore[assignment]
                self.keys.all_jobs, above, "+inf", start=0, num=batch, withscores=True
            )
            ids = [str(member, "utf-8") for member, _ in entries]
            heads = self.redis.mget([self.keys.job(job_id) for job_id in ids]) if ids else []
            for job_id, head in zip(ids, heads, strict=True):
                # Only a record larger than a head keeps may hold a part too large for one.
                if isinstance(head, bytes) and len(head) > INLINE_BYTES and is_whole(head):
                    done = self.run(snapshot.split_record(job_id, head))
                    split, missed = split + done, missed + 1 - done
            if len(entries) < batch:
                break
            above = f"({entries[-1][1]!r}"
        if not missed:  # one changed while read is split at the next start
            self.redis.set(self.keys.records_split, "1")
        return split

    def sweep_timeouts(self, now: float, batch: int = ENDINGS_BATCH) -> list[str]:
        """Every run job past JOB_TIMEOUT_SECS timed out: failed, or retried under its own
        policy. `batch` per script call."""
        return self._drain(
            lambda: upkeep.sweep_timeouts(
                now,
                self.settings.job_timeout_secs,
                batch,
                RetryPolicy.of(self.settings),
                node_ttl=self.settings.node_ttl_secs,
                builtin=self.settings.builtin_registry,
            ),
            batch,
        )

    def promote_due(self, now: float, batch: int = MOVES_BATCH) -> list[str]:
        """The delayed jobs due by `now` become pending (on a live node)."""
        return self._drain(
            lambda: upkeep.promote_due(now, self.settings.node_ttl_secs, batch), batch
        )

    def place_unplaced(self, now: float, batch: int = 200, calls: int = 10) -> list[str]:
        """The unplaced jobs placed where a node fits now, once room may have appeared (a
        flagged pass, PLACE_UNPLACED): `batch` per script call, at most `calls` calls, so a
        tick holds Redis for bounded slices; the pass goes on at the next tick. The ids."""
        placed: list[str] = []
        for _ in range(calls):
            step = self.run(upkeep.place_unplaced(now, self.settings.node_ttl_secs, batch))
            placed.extend(step.ids)
            if step.read < batch:
                break
        return placed

    def _drain(self, call: Callable[[], Call[upkeep.Batch]], batch: int) -> list[str]:
        """`call()`'s script run until a run reads fewer entries than `batch`; the ids."""
        done: list[str] = []
        while True:
            swept = self.run(call())
            done.extend(swept.ids)
            if swept.read < batch:
                return done

    def prune_finished(self, now: float, batch: int = MOVES_BATCH) -> list[str]:
        """Remove from Redis the jobs finished more than JOB_RETENTION_SECS ago that the
        snapshot already holds (none when the retention is 0: keep forever)."""
        if not self.settings.job_retention_secs:
            return []
        cutoff = now - self.settings.job_retention_secs
        removed: list[str] = []
        skip = 0
        while True:
            pruned = self.run(upkeep.prune_finished(cutoff, skip, batch))
            removed.extend(pruned.ids)
            skip += pruned.kept
            if pruned.read < batch:
                return removed

    def observe_nodes(self, node_ids: list[str], now: float) -> float:
        """External registry: these compute nodes were seen healthy at `now` (the sweep's
        record of them, which `requeue_lost` reads as the built-in registry's heartbeats).
        Returns since when the registry has been read without a failure."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.keys.registry_readable_since, now, nx=True)
        if node_ids:
            pipe.zadd(self.keys.nodes_compute, dict.fromkeys(node_ids, now))
        pipe.get(self.keys.registry_readable_since)
        return float(pipe.execute()[-1])

    def registry_unreadable(self) -> None:
        """The sweep could not read the external registry: the unbroken stretch ends."""
        self.redis.delete(self.keys.registry_readable_since)

    def requeue_lost(self, now: float, limit: int = MOVES_BATCH) -> list[Requeued]:
        """Move the pending jobs of nodes lost for NODE_LOST_SECS to live nodes, `limit` per
        script call at most (fewer when their records are large: life.py move_each), until a
        call moves none. Nodes are the built-in registry's, or the external registry's as
        the sweep saw them (`observe_nodes`)."""
        moved: list[Requeued] = []
        s = self.settings
        while True:
            call = upkeep.requeue_lost(
                now, s.node_lost_after, s.node_ttl_secs, limit, s.builtin_registry
            )
            batch = self.run(call)
            moved.extend(batch)
            if not batch:
                return moved

    def lose_running(self, now: float, limit: int = ENDINGS_BATCH) -> list[Lost]:
        """The running jobs of nodes lost for NODE_LOST_SECS: run jobs fail as `node lost`
        (retried on a live node while retries are left), services are placed again. `limit`
        per script call at most (fewer when their records are large), until a call handles
        none."""
        lost: list[Lost] = []
        s = self.settings
        while True:
            call = upkeep.lose_running(
                now, s.node_lost_after, s.node_ttl_secs, RetryPolicy.of(s), limit
            )
            batch = self.run(call)
            lost.extend(batch)
            if not batch:
                return lost

    def outbox_head(self, limit: int) -> list[bytes]:
        """The oldest `limit` outbox entries ("<event number> <message JSON>"), not removed."""
        entries: list[bytes] = self.redis.lrange(self.keys.outbox, 0, limit - 1)  # type: ignore[assignment]
        return entries

    def trim_outbox(self, handed_over: list[bytes]) -> int:
        """Remove these entries (an `outbox_head` read, now handed to rq) from the outbox."""
        return self.run(upkeep.trim_outbox(handed_over)) if handed_over else 0

    def due_schedules(self, now: float, skip: int, limit: int) -> list[schedules.Stored]:
        """The schedules due at `now`, `limit` after the first `skip` (scripts/schedules.py)."""
        return self.run(schedules.due_schedules(now, skip, limit))

    def replace_schedule(self, name: str, old: bytes, new: bytes, next_tick: int) -> bool:
        """Compare-and-set of a schedule's record; False when it was no longer `old`."""
        return self.run(schedules.replace_schedule(name, old, new, next_tick))

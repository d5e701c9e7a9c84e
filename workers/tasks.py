"""The rq task functions. Each reads the time at its start and its state from Redis, and is
idempotent, so a run repeated after a crash (or abandoned by a killed worker and followed by
the next period's run) loses and duplicates nothing.

Periodic tasks take their period number (the trigger's job id carries it too) and log the run
under {P}:runs:<task>.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import httpx
import msgspec

from scheduler.config import Settings
from scheduler.nodes.placement import healthy_compute_nodes
from scheduler.nodes.registry import RegistryError, RemoteRegistry
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from workers import context
from workers.context import Context
from workers.outage import RoutineFailure
from workers.queues import enqueue_publish

log = logging.getLogger("workers.tasks")

OUTBOX_BATCH = 500
FLUSH_BUDGET_SECS = 30.0
SETTLE_BUDGET_SECS = 10.0  # within promote's rq time limit, its next run a few s late at most
SNS_TOPIC_PATH = "/topics/job-status/publish"

_encoder = msgspec.json.Encoder()


class PublishFailed(RoutineFailure):
    """SNS did not take the event; rq retries the job with backoff, a WARNING line each time."""


def sweep(period: int) -> int:
    """Fail the run jobs running longer than JOB_TIMEOUT_SECS; fail or re-place the running
    jobs of lost nodes and move their pending jobs to live ones; prune finished jobs past
    JOB_RETENTION_SECS and job events past EVENTS_RETAIN_SECS; mark this release's function
    library in use and delete those no process has marked for LIBRARY_GRACE_SECS
    (ops.upkeep.retire_libraries). Returns how many jobs timed out."""
    ctx = context.current()
    now = time.time()
    failed = ctx.store.run(ops.upkeep.sweep_timeouts(now))
    if failed:
        log.info("sweep: %d job(s) timed out: %s", len(failed), " ".join(failed))
        ctx.count(Counter(timeouts=len(failed)))
    judge_lost = _observe_registry(ctx, now)
    lost = ctx.store.run(ops.upkeep.lose_running(now)) if judge_lost else []
    for gone in lost:
        log.warning(
            "sweep: %s was running on lost node %s: now %s on %s",
            *(gone.job_id, gone.from_node, gone.status, gone.to_node),
        )
    if lost:
        ctx.count(Counter(lost=len(lost)))
    moved = ctx.store.run(ops.upkeep.requeue_lost(now)) if judge_lost else []
    for job in moved:
        log.info("sweep: %s moved from lost node %s to %s", job.job_id, job.from_node, job.to_node)
    if moved:
        ctx.count(Counter(requeued=len(moved)))
    ended = ctx.store.run(ops.upkeep.finish_cancels(now))
    if ended:
        log.info("sweep: %d cancelled job(s) past the grace: %s", len(ended), " ".join(ended))
        ctx.count(Counter(cancelled_by_sweep=len(ended)))
    pruned = ctx.store.run(ops.upkeep.prune_finished(now))
    if pruned:
        log.info("sweep: %d finished job(s) past retention removed from Redis", len(pruned))
        ctx.count(Counter(pruned=len(pruned)))
    ctx.store.run(ops.logs.trim_events(now))
    retired = ctx.store.run(ops.upkeep.retire_libraries())
    if retired:
        log.info("sweep: function libraries unused for %d s deleted: %s",
        ops.upkeep.LIBRARY_GRACE_SECS,
                 " ".join(retired))  # fmt: skip
    ctx.record_run("sweep", period, now)
    return len(failed)


def promote(period: int) -> int:
    """The delayed jobs now due become pending (a submitted delay, a retry's backoff), on a
    live node; then, when room may have appeared, the unplaced jobs that fit are placed
    (docs/GUIDE.md, Placement); then the waiters of the endings too large for the script that
    ended their job are settled (docs/GUIDE.md, Dependencies), one bounded call after another
    until none is left (or SETTLE_BUDGET_SECS: the next run goes on). Returns how many
    became pending by the first two."""
    ctx = context.current()
    now = time.time()
    promoted = ctx.store.run(ops.upkeep.promote_due(now))
    if promoted:
        log.info("promote: %d delayed job(s) now pending: %s", len(promoted), " ".join(promoted))
        ctx.count(Counter(promoted=len(promoted)))
    placed = ctx.store.run(ops.upkeep.place_unplaced(now))
    if placed:
        log.info("promote: %d unplaced job(s) placed: %s", len(placed), " ".join(placed[:20]))
        ctx.count(Counter(placed=len(placed)))
    settled = ctx.store.run(ops.upkeep.settle_endings(budget_secs=SETTLE_BUDGET_SECS))
    if settled.calls:
        log.info("promote: waiters settled in %d call(s), %d left", settled.calls, settled.left)
        ctx.count(Counter(settle_calls=settled.calls))
    ctx.record_run("promote", period, now)
    return len(promoted) + len(placed)


def _observe_registry(ctx: Context, now: float) -> bool:
    """With an external registry, record its healthy compute nodes as seen now, so the lost
    node rule of the built-in registry (NODE_LOST_SECS) applies to its nodes too. True when
    lost nodes may be judged: a registry outage must not make nodes look lost, during it or
    after it, so that needs NODE_LOST_SECS of reads without a failure."""
    s = ctx.settings
    if s.builtin_registry:
        return True
    try:
        healthy = asyncio.run(_registry_healthy_nodes(s))
    except RegistryError as exc:
        log.warning("sweep: registry not readable (%s); lost nodes not checked this time", exc)
        ctx.store.run(ops.upkeep.registry_unreadable())
        return False
    readable_since = ctx.store.run(ops.upkeep.observe_nodes(healthy, now))
    return now - readable_since >= s.node_lost_after


async def _registry_healthy_nodes(s: Settings) -> list[str]:
    registry = RemoteRegistry(
        s.registry_url, api_key=s.api_key, timeout=s.registry_timeout_secs, cache_secs=0
    )
    try:
        return healthy_compute_nodes(await registry.read_compute_nodes())
    finally:
        await registry.aclose()


def ingest_sqs(period: int) -> dict[str, int]:
    """Drain the SQS queue `jobs` into jobs (workers.ingest); returns this poll's counters."""
    from workers.ingest import ingest

    ctx = context.current()
    now = time.time()
    if not ctx.settings.sqs_url:
        return {}
    counts = asyncio.run(ingest(ctx))
    ctx.record_run("sqs", period, now)
    return dict(counts)


def _hand_over(ctx: context.Context, entry: bytes, counts: Counter[str]) -> None:
    number, _, message = entry.decode(errors="replace").partition(" ")
    if not number.isdigit() or not message:
        log.error("outbox: malformed entry dropped: %r", entry[:200])
        counts["outbox_malformed"] += 1
    elif not ctx.settings.sns_url:
        counts["events_discarded"] += 1  # as the original: no SNS_URL, no events
    elif enqueue_publish(ctx.redis, ctx.settings, int(number), message):
        counts["events_enqueued"] += 1


def flush_outbox(period: int) -> int:
    """Turn outbox entries into publish jobs, then remove them; returns how many it removed.

    An entry leaves the outbox only after its job is enqueued, and the job id is the event
    number (enqueued with unique=True): a crash in between re-flushes it without a second job.
    """
    ctx = context.current()
    now = time.time()
    deadline = time.monotonic() + FLUSH_BUDGET_SECS
    counts: Counter[str] = Counter()
    removed = 0
    while time.monotonic() < deadline:
        entries = ctx.store.run(ops.upkeep.outbox_head(OUTBOX_BATCH))
        for entry in entries:
            _hand_over(ctx, entry, counts)
        trimmed = ctx.store.run(ops.upkeep.trim_outbox(entries))
        removed += trimmed
        # Fewer removed than read: a concurrent flush took this head; it goes on from here.
        if len(entries) < OUTBOX_BATCH or trimmed < len(entries):
            break
    ctx.count(counts)
    ctx.record_run("outbox", period, now)
    return removed


def publish_event(number: int, message: str) -> None:
    """POST one event to SNS topic job-status; raising makes rq retry it with backoff."""
    ctx = context.current()
    if not ctx.settings.sns_url:
        log.warning("sns: SNS_URL is no longer set; event %d not published", number)
        return
    url = ctx.settings.sns_url.rstrip("/") + SNS_TOPIC_PATH
    body = _encoder.encode({"message": message})
    try:
        response = ctx.http.post(url, content=body, headers={"Content-Type": "application/json"})
    except httpx.HTTPError as exc:
        ctx.count(Counter(publish_failures=1))
        raise PublishFailed(f"event {number}: SNS unreachable: {exc!r}") from None
    if not response.is_success:
        ctx.count(Counter(publish_failures=1))
        detail = response.text[:200].strip()
        raise PublishFailed(f"event {number}: SNS answered {response.status_code}: {detail}")
    ctx.count(Counter(events_published=1))


def fire_schedules(period: int) -> dict[str, int]:
    """Make the job of every due schedule tick (workers.firing); returns this run's counters.
    The time is Redis's, as the trigger's periods: every host agrees on which ticks are due."""
    from workers.firing import fire
    from workers.schedule import redis_time

    ctx = context.current()
    now = redis_time(ctx.redis)
    counts = asyncio.run(fire(ctx, now))
    ctx.record_run("schedules", period, now)
    return dict(counts)


def snapshot(period: int) -> int:
    """Write the jobs changed since the last snapshot to SQLite (scheduler.snapshot.writer)."""
    ctx = context.current()
    now = time.time()
    written = snapshot_once(ctx.settings)
    ctx.record_run("snapshot", period, now)
    return written

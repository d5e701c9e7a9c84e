"""Firing the due schedules (docs/GUIDE.md, Schedules): the `schedules` periodic task.

Exactly one job per tick, with any number of workers and API processes, and without a lock:

1. the due schedules are read from `{P}:schedules:due` (score = next tick <= now), so a run
   costs the schedules due, never the schedules stored;
2. a tick's job is created through the store's idempotent create (CREATE_JOB with a Dedup
   "submit" key made from the schedule's uid and the tick, `models.schedule.tick_key`): a
   second create of the same tick answers the job the first made;
3. the schedule is then advanced by a compare-and-set (REPLACE_SCHEDULE: only if its record is
   still the one read, so its stored tick is still this tick).

A firer killed between 2 and 3 leaves the tick due; the next run creates it again under the
same key, gets the job already made, and advances. Two firers on one tick make one job: the
second create is a duplicate and the second advance finds the record changed. A tick whose
job cannot be placed (no healthy node, the registry unreadable) stays due and is tried again
at every run; past SCHEDULE_GRACE_SECS it has been missed, and the schedule's catch-up policy
decides (`models.schedule.plan`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import msgspec

from scheduler.models.job import JobCreate, asks_fit, new_job, stamped
from scheduler.models.schedule import (
    Plan,
    Schedule,
    fired,
    plan,
    schedule_decoder,
    schedule_encoder,
    tick_key,
)
from scheduler.models.wire import InvalidInput, rfc3339
from scheduler.nodes.placement import NoHealthyNodes
from scheduler.nodes.registry import NodeSource, RegistryError, node_source
from scheduler.store import ops
from scheduler.store.errors import OverQuota, ScheduleNotFound, StoreNotReady
from scheduler.store.scripts.jobs import Dedup
from scheduler.store.scripts.schedules import Stored
from workers.context import Context

log = logging.getLogger("workers.schedules")

# A tick's idempotency key outlives any firer that died between the create and the advance
# by far; a tick still due after this (every worker down for a week) is a missed tick anyway.
TICK_KEY_TTL_SECS = 7 * 86400
BATCH = 100
FIRE_BUDGET_SECS = 30.0  # one run stops reading due schedules after this; the next goes on


class Unplaced(Exception):
    """The tick's job found no node (or no registry), or its namespace's quota refused it:
    the tick stays due."""


async def fire_due(ctx: Context, now: float, nodes: NodeSource, batch: int = BATCH) -> Counter[str]:
    """Fire every schedule due at `now` (epoch s); returns the run's counters."""
    counts: Counter[str] = Counter()
    skip = 0  # schedules left due by this run (unplaced, unreadable): read past them
    deadline = time.monotonic() + FIRE_BUDGET_SECS
    while time.monotonic() < deadline:
        due = ctx.store.run(ops.schedules.due_schedules(now, skip, batch))
        for stored in due:
            try:
                outcome = await fire_one(ctx, stored, now, nodes)
            except Unplaced:
                counts["schedule_unplaced"] += 1
                skip += 1
                continue
            except (msgspec.DecodeError, InvalidInput) as exc:
                # A record this version cannot read, or a template the store refuses (its
                # `after` job gone, say): logged, and read past, so the others still fire.
                log.error("schedules: %s: not fired: %s", stored.name, exc)
                counts["schedule_unreadable"] += 1
                skip += 1
                continue
            counts[outcome] += 1
        # A fired schedule may be due again (its next tick <= now, a late run catching up
        # within the grace): read again until nothing is due but what this run left.
        if not due:
            break
    return counts


async def fire_one(ctx: Context, stored: Stored, now: float, nodes: NodeSource) -> str:
    """Settle the stored tick of one due schedule: its job (if the plan makes one), then the
    advance. Returns the counter it adds to; raises Unplaced (the tick stays due)."""
    schedule = schedule_decoder.decode(stored.record)
    step = plan(schedule, now, ctx.settings.schedule_grace_secs)
    job_id, duplicate = "", False
    if step.fire:
        job_id, duplicate = await _make_job(ctx, schedule, step, now, nodes)
    new = fired(schedule, step, job_id, now)
    record = schedule_encoder.encode(new)
    try:
        advanced = ctx.store.run(
            ops.schedules.replace_schedule(schedule.name, stored.record, record, new.next_tick)
        )
    except ScheduleNotFound:  # deleted since it was read
        advanced = False
    if step.fire and not duplicate:
        # Made here (even if another firer advanced the schedule first): counted once.
        late = " (missed ticks caught up once)" if step.missed else ""
        log.info(
            "schedules: %s: tick %s made %s%s", schedule.name, rfc3339(step.tick), job_id, late
        )
        return "schedule_caught_up" if step.missed else "schedule_fired"
    if not advanced:
        # Another firer settled this tick first, or the schedule was paused or deleted.
        return "schedule_raced"
    if not step.fire:
        log.info("schedules: %s: missed tick %s skipped", schedule.name, rfc3339(step.tick))
        return "schedule_skipped"
    return "schedule_duplicates"  # made by a firer that died before the advance


async def _make_job(
    ctx: Context, schedule: Schedule, step: Plan, now: float, nodes: NodeSource
) -> tuple[str, bool]:
    """(the job id of the tick, whether it existed already)."""
    request = msgspec.convert(schedule.job, JobCreate)
    job = stamped(new_job(request), request, now)  # a template's delay_secs delays each job
    job = msgspec.structs.replace(job, schedule=schedule.name)  # its origin, on its record
    key = tick_key(schedule, step.tick)
    try:
        placement = await nodes.placement(job.instance_id, asks_fit(job))
        dedup = Dedup("submit", key, TICK_KEY_TTL_SECS)
        created = ctx.store.run(ops.jobs.create(job, placement, now, dedup))
    except (RegistryError, NoHealthyNodes) as exc:
        # The registry may fail before the create looks at the key: a tick made already
        # (its firer died before the advance) needs no node.
        made: bytes | None = ctx.redis.get(ctx.keys.submission(key))  # type: ignore[assignment]
        if made is not None:
            return made.decode().split(" ")[0], True
        log.warning("schedules: %s: tick %s not placed (%s)", schedule.name, step.tick, exc)
        raise Unplaced() from None
    except OverQuota as exc:
        # Its namespace holds all the pending jobs its quota allows (docs/GUIDE.md, Quotas):
        # the tick stays due, made once the namespace has room.
        log.warning("schedules: %s: tick %s not made (%s)", schedule.name, step.tick, exc)
        raise Unplaced() from None
    if not created.job:  # made before, and since removed (JOB_RETENTION_SECS)
        return "", True
    made_job: dict[str, str] = msgspec.json.decode(created.job)
    return made_job.get("job_id", ""), created.duplicate


async def fire(ctx: Context, now: float) -> Counter[str]:
    """One run of the `schedules` task: the node source, the firing, the counters."""
    nodes = node_source(ctx.settings)
    try:
        counts = await fire_due(ctx, now, nodes)
    except StoreNotReady:
        # Redis came back empty; the snapshot task restores it (schedules too) within one
        # interval, and the ticks are due then still.
        log.warning("schedules: store not restored yet; nothing fired this time")
        counts = Counter(schedule_unplaced=1)
    finally:
        await nodes.aclose()
    ctx.count(counts)
    return counts

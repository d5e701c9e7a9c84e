"""A schedule (docs/GUIDE.md, Schedules): a named job template that makes one job per tick of a
5-field cron expression (in an IANA time zone) or of a fixed interval, with the policy for
ticks missed while nothing could fire them. Pure: every function takes the time (`now`).

Ticks are whole epoch seconds. A cron tick is the next matching minute in the schedule's time
zone, as cronsim (healthchecks.io's evaluator) computes it, with Debian cron's handling of
daylight saving time for expressions at a fixed time: a time that does not exist on the day
clocks go forward runs when they have gone forward, a time that happens twice on the day they
go back runs once. An interval's ticks are the multiples of `every_secs` since the Unix epoch
(every 3600 is on the UTC hour): its time zone is UTC, nothing else.

A tick fires while it is at most the grace (SCHEDULE_GRACE_SECS) late: a firer that stalled
or died is replaced within seconds and every tick still gets its job. A tick later than that
was missed (the workers were down, or no node was healthy): `catchup` "skip" drops the missed
ticks, "once" makes one job for all of them; either way the schedule goes on with its first
tick that is not late (`plan`).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
from cronsim import CronSim, CronSimError

from scheduler.models.access_key import ANYONE, Principal
from scheduler.models.cron import cron_refusal
from scheduler.models.job import JobCreate, new_job, validate_create
from scheduler.models.namespace import stored
from scheduler.models.wire import DecodeError, InvalidInput, check_id, decode_go_style, rfc3339

CATCHUP = ("skip", "once")
MAX_EVERY_SECS = 10 * 366 * 86400
# IANA names: letters, digits and _ + - /; never a path that leaves the zone database.
TIMEZONE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*")
_TOO_MANY_SKIPS = 8  # cron ticks stepped over when one lands before its start (see next_tick)


class ScheduleRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The POST /schedules body. `job` is the template, the body POST /jobs would take."""

    name: str
    cron: str = ""
    every_secs: int = 0
    timezone: str = "UTC"
    catchup: str = "skip"
    paused: bool = False
    job: dict[str, Any] | None = None


class Schedule(msgspec.Struct, kw_only=True):
    """A schedule as Redis keeps it: the request, validated, and its state. `uid` is drawn at
    creation, so a schedule deleted and made again under the same name never shares a tick's
    idempotency key with the old one. `next_tick` is 0 while paused (the due set holds the
    others, scored by it)."""

    name: str
    cron: str = ""
    every_secs: int = 0
    timezone: str = "UTC"
    catchup: str = "skip"
    paused: bool = False
    job: dict[str, Any]
    uid: str
    created_at: str
    next_tick: int = 0
    last_tick: int = 0
    last_run_at: str = ""
    last_job_id: str = ""


schedule_decoder = msgspec.json.Decoder(Schedule)
schedule_encoder = msgspec.json.Encoder(order="deterministic")


# A job's fields a schedule's template may not have, and why: a fixed time or fixed jobs to
# wait for mean nothing for a job made at every tick (the CLI's `schedule add` offers neither).
NOT_IN_TEMPLATE = {
    "run_at": "delay_secs delays each job",
    "after": "each tick's job runs alone",
}


def zone(name: str) -> ZoneInfo:
    if len(name) > 64 or not TIMEZONE_RE.fullmatch(name):
        raise InvalidInput(f"invalid timezone {name[:64]!r}: use an IANA name like Europe/Paris")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):
        raise InvalidInput(
            f"invalid timezone {name!r}: not in the time zone database (use e.g. Europe/Paris)"
        ) from None


def _template(job: dict[str, Any] | None, by: Principal) -> dict[str, Any]:
    """The job template checked exactly as a POST /jobs body is (decode, then validate_create),
    kept as the JSON object of its set fields; its namespace, the schedule's, placed as a
    submit by `by` places a job's (the key's first when it names none; OutsideNamespace for
    one the key lacks), kept as stored (none for the default's)."""
    if job is None:
        raise InvalidInput("invalid job: the job template is required (the POST /jobs body)")
    try:
        request = decode_go_style(msgspec.json.encode(job), JobCreate)
        made = new_job(request, by=by)
        validate_create(made)
    except (DecodeError, InvalidInput) as exc:
        raise InvalidInput(f"invalid job: {exc}") from None
    for field, why in NOT_IN_TEMPLATE.items():
        if getattr(request, field, None):
            raise InvalidInput(f"invalid job: a template has no {field} ({why})")
    template: dict[str, Any] = msgspec.to_builtins(request)
    template.pop("namespace", None)
    if made.namespace:
        template["namespace"] = made.namespace
    return template


def namespace_of(schedule: Schedule) -> str:
    """The namespace a schedule belongs to, as stored ("": the default's): its template's,
    which every job it fires carries."""
    return stored(str(schedule.job.get("namespace") or ""))


def _check_cron(expr: str, tz: ZoneInfo, now: float) -> None:
    if len(expr) > 256 or len(expr.split()) != 5:
        raise InvalidInput(f"invalid cron {expr[:256]!r}: use 5 fields: minute hour day month dow")
    try:
        next(CronSim(expr, datetime.fromtimestamp(now, tz)))
    except CronSimError as exc:
        raise InvalidInput(f"invalid cron {expr!r}: {cron_refusal(expr, str(exc))}") from None
    except StopIteration:
        raise InvalidInput(f"invalid cron {expr!r}: it never matches") from None


def new_schedule(
    request: ScheduleRequest, uid: str, now: float, by: Principal = ANYONE
) -> Schedule:
    """The schedule a request asks for, its first tick the first after `now` (none while
    paused), made by the key `by` (its namespace: `_template`); InvalidInput naming the
    field for anything it cannot be."""
    check_id("name", request.name)
    if bool(request.cron) == bool(request.every_secs):
        raise InvalidInput("invalid cron/every_secs: give exactly one of cron and every_secs")
    tz = zone(request.timezone)
    if request.cron:
        _check_cron(request.cron, tz, now)
    elif not 1 <= request.every_secs <= MAX_EVERY_SECS:
        raise InvalidInput(f"invalid every_secs {request.every_secs}: use 1 to {MAX_EVERY_SECS}")
    elif request.timezone != "UTC":
        raise InvalidInput(
            "invalid timezone: every_secs counts from the Unix epoch, in UTC; "
            "use cron for times of day in a time zone"
        )
    if request.catchup not in CATCHUP:
        raise InvalidInput(f"invalid catchup {request.catchup!r}: use skip or once")
    schedule = Schedule(
        name=request.name,
        cron=request.cron,
        every_secs=request.every_secs,
        timezone=request.timezone,
        catchup=request.catchup,
        paused=request.paused,
        job=_template(request.job, by),
        uid=uid,
        created_at=rfc3339(now),
    )
    return schedule if request.paused else resumed(schedule, now)


def next_tick(schedule: Schedule, after: int) -> int:
    """The schedule's first tick strictly after `after` (epoch s); 0 if it has none left."""
    if schedule.every_secs:
        return (after // schedule.every_secs + 1) * schedule.every_secs
    ticks = CronSim(schedule.cron, datetime.fromtimestamp(after, ZoneInfo(schedule.timezone)))
    # With Debian's handling of a fixed time, the hour clocks repeat is read as its first
    # pass: from inside the second pass the next match can lie before `after`. Step over it.
    for _ in range(_TOO_MANY_SKIPS):
        try:
            tick = int(next(ticks).timestamp())
        except StopIteration:
            return 0
        if tick > after:
            return tick
    return 0


def resumed(schedule: Schedule, now: float) -> Schedule:
    """Active again from `now`: ticks while it was paused are not made up."""
    return msgspec.structs.replace(schedule, paused=False, next_tick=next_tick(schedule, int(now)))


def paused(schedule: Schedule) -> Schedule:
    return msgspec.structs.replace(schedule, paused=True, next_tick=0)


@dataclass(frozen=True, slots=True)
class Plan:
    """What firing a due schedule does: settle its stored tick `tick` (a job for it when
    `fire`), then go on at `next_tick` (0: no tick left). `missed`: `tick` was more than the
    grace late, so the catch-up policy decided."""

    tick: int
    fire: bool
    next_tick: int
    missed: bool


def plan(schedule: Schedule, now: float, grace: float) -> Plan:
    """The firing of a due schedule (`next_tick` <= now) at `now`."""
    tick = schedule.next_tick
    if tick >= now - grace:
        return Plan(tick, True, next_tick(schedule, tick), missed=False)
    first_on_time = next_tick(schedule, math.ceil(now - grace) - 1)
    return Plan(tick, schedule.catchup == "once", first_on_time, missed=True)


def fired(schedule: Schedule, step: Plan, job_id: str, now: float) -> Schedule:
    """The schedule once `step` is done (`job_id`: the job it made, "" for none)."""
    state: dict[str, Any] = {"next_tick": step.next_tick}
    if step.fire:
        state |= {"last_tick": step.tick, "last_run_at": rfc3339(now), "last_job_id": job_id}
    return msgspec.structs.replace(schedule, **state)


def tick_key(schedule: Schedule, tick: int) -> str:
    """The idempotency key of the job of `schedule`'s tick `tick`, in the space of POST /jobs'
    keys (store/scripts/jobs.py Dedup "submit"). Those are 32 hex digits (the SHA-256 of the
    client's key): the prefix keeps a client from ever naming a tick's key."""
    digest = hashlib.sha256(f"{schedule.uid}\0{tick}".encode()).hexdigest()[:32]
    return f"schedule-{digest}"


class ScheduleView(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A schedule as the API shows it (`view`): its request, with the times as RFC 3339 text
    and empty fields left out (as a job's): `cron` or `every_secs`, whichever it has, and
    the runs once there are some."""

    name: str
    cron: str = ""
    every_secs: int = 0
    timezone: str
    catchup: str
    paused: bool
    job: dict[str, Any]
    created_at: str
    next_run_at: str = ""  # absent while paused
    last_run_at: str = ""
    last_job_id: str = ""


def view(schedule: Schedule) -> ScheduleView:
    """The schedule as the API shows it."""
    return ScheduleView(
        name=schedule.name,
        cron=schedule.cron,
        every_secs=0 if schedule.cron else schedule.every_secs,
        timezone=schedule.timezone,
        catchup=schedule.catchup,
        paused=schedule.paused,
        job=schedule.job,
        created_at=schedule.created_at,
        next_run_at=rfc3339(schedule.next_tick) if schedule.next_tick else "",
        last_run_at=schedule.last_run_at,
        last_job_id=schedule.last_job_id if schedule.last_run_at else "",
    )

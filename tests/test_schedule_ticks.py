"""The pure tick logic of schedules (models/schedule.py): next ticks of cron expressions and
intervals in time zones, daylight saving time included, the catch-up policies, and what a
request may be, each with the time injected."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest

from scheduler.models.schedule import (
    Schedule,
    ScheduleRequest,
    fired,
    new_schedule,
    next_tick,
    plan,
    resumed,
    tick_key,
    view,
)
from scheduler.models.wire import InvalidInput


def at(text: str, tz: str = "UTC") -> int:
    """Epoch seconds of a wall-clock time `YYYY-MM-DD HH:MM[:SS]` in `tz`."""
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp())


def utc(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


def schedule(**fields: Any) -> Schedule:
    base: dict[str, Any] = {"name": "s", "job": {"command": "x"}, "uid": "u", "created_at": ""}
    return Schedule(**{**base, **fields})


PARIS = "Europe/Paris"


@pytest.mark.parametrize(
    ("cron", "tz", "after", "expected_utc"),
    [
        # Plain UTC.
        ("* * * * *", "UTC", at("2026-03-01 10:00:00"), "2026-03-01 10:01:00"),
        ("* * * * *", "UTC", at("2026-03-01 10:00:30"), "2026-03-01 10:01:00"),
        ("0 3 * * *", "UTC", at("2026-03-01 03:00:00"), "2026-03-02 03:00:00"),
        ("*/15 * * * *", "UTC", at("2026-03-01 10:07:00"), "2026-03-01 10:15:00"),
        ("0 0 1 * *", "UTC", at("2026-01-31 12:00:00"), "2026-02-01 00:00:00"),
        ("0 9 * * 1", "UTC", at("2026-03-04 00:00:00"), "2026-03-09 09:00:00"),  # Monday
        # A time zone: 03:00 in Paris is 02:00 UTC in winter, 01:00 UTC in summer.
        ("0 3 * * *", PARIS, at("2026-01-10 12:00:00"), "2026-01-11 02:00:00"),
        ("0 3 * * *", PARIS, at("2026-07-10 12:00:00"), "2026-07-11 01:00:00"),
        ("0 9 * * *", "America/New_York", at("2026-01-10 20:00:00"), "2026-01-11 14:00:00"),
        # Clocks go forward (Paris, 2026-03-29 02:00 -> 03:00): 02:30 does not exist that day
        # and runs once the clocks have gone forward (Debian cron's rule).
        ("30 2 * * *", PARIS, at("2026-03-28 12:00:00"), "2026-03-29 01:00:00"),
        ("30 2 * * *", PARIS, at("2026-03-29 01:00:00"), "2026-03-30 00:30:00"),
        # Clocks go back (Paris, 2026-10-25 03:00 -> 02:00): 02:30 happens twice, runs once.
        ("30 2 * * *", PARIS, at("2026-10-24 12:00:00"), "2026-10-25 00:30:00"),
        ("30 2 * * *", PARIS, at("2026-10-25 00:30:00"), "2026-10-26 01:30:00"),
        # From inside the repeated hour (02:15 of its second pass) the next is the next day.
        ("30 2 * * *", PARIS, at("2026-10-25 01:15:00"), "2026-10-26 01:30:00"),
        # An every-15-minutes job runs through the repeated hour in real time: each instant.
        ("*/30 * * * *", PARIS, at("2026-10-25 00:00:00"), "2026-10-25 00:30:00"),
        ("*/30 * * * *", PARIS, at("2026-10-25 00:30:00"), "2026-10-25 01:00:00"),
        ("*/30 * * * *", PARIS, at("2026-10-25 01:00:00"), "2026-10-25 01:30:00"),
    ],
)
def test_next_cron_tick(cron: str, tz: str, after: int, expected_utc: str) -> None:
    tick = next_tick(schedule(cron=cron, timezone=tz), after)
    assert utc(tick) == expected_utc
    assert tick > after


@pytest.mark.parametrize(
    ("every", "after", "expected"),
    [(60, 0, 60), (60, 59, 60), (60, 60, 120), (1, 1000, 1001), (3600, 7199, 7200)],
)
def test_next_interval_tick_is_the_next_multiple_since_the_epoch(
    every: int, after: int, expected: int
) -> None:
    assert next_tick(schedule(every_secs=every), after) == expected


def test_cron_ticks_never_repeat_or_go_back_across_a_year_of_dst_changes() -> None:
    for cron in ("30 2 * * *", "0 * * * *", "*/20 1-3 * * *"):
        s = schedule(cron=cron, timezone=PARIS)
        tick, seen = at("2026-01-01 00:00:00"), set()
        while tick < at("2027-01-01 00:00:00"):
            following = next_tick(s, tick)
            assert following > tick and following not in seen, (cron, utc(tick))
            seen.add(following)
            tick = following


GRACE = 60


@pytest.mark.parametrize(
    ("catchup", "late", "fire", "missed", "following"),
    [
        ("skip", 0, True, False, 3300),  # on time
        ("skip", 59, True, False, 3300),  # late, within the grace: still fires
        ("skip", 60, True, False, 3300),
        ("skip", 61, False, True, 3300),  # missed: skipped; 3300 is not late
        ("once", 61, True, True, 3300),  # missed: one job for them
        ("skip", 3600, False, True, 6600),  # 6600 is now: it fires, on time, next
        ("once", 3600, True, True, 6600),
        ("once", 3700, True, True, 6900),  # 6600 is 100 s late: missed with the others
    ],
)
def test_plan_fires_late_ticks_within_the_grace_and_applies_the_policy_past_it(
    catchup: str, late: int, fire: bool, missed: bool, following: int
) -> None:
    s = schedule(every_secs=300, catchup=catchup, next_tick=3000)
    step = plan(s, 3000 + late, GRACE)
    assert (step.tick, step.fire, step.missed, step.next_tick) == (3000, fire, missed, following)


def test_a_missed_run_goes_on_with_the_ticks_still_within_the_grace() -> None:
    """Every second, 100 s of outage, grace 60: the ticks 60 s late or less still fire one by
    one; the 40 before them are skipped (skip) or made into one job (once)."""
    for catchup, jobs_for_missed in (("skip", 0), ("once", 1)):
        s = schedule(every_secs=1, catchup=catchup, next_tick=1000)
        now, jobs = 1100, 0
        first = plan(s, now, GRACE)
        assert first.missed and first.next_tick == 1040
        jobs += first.fire
        s = fired(s, first, "job-1", now)
        while s.next_tick <= now:
            step = plan(s, now, GRACE)
            assert not step.missed and step.fire
            jobs += 1
            s = fired(s, step, "job-x", now)
        assert jobs == jobs_for_missed + 61  # ticks 1040..1100
        assert s.next_tick == 1101


def test_fired_keeps_the_last_job_only_when_one_was_made() -> None:
    s = schedule(every_secs=10, next_tick=100)
    made = fired(s, plan(s, 100, GRACE), "job-7", 100.5)
    assert (made.next_tick, made.last_tick, made.last_job_id) == (110, 100, "job-7")
    skipped = fired(s, plan(s, 1000, GRACE), "", 1000)
    assert (skipped.last_job_id, skipped.last_tick) == ("", 0)


def test_resume_starts_after_now_and_makes_up_nothing() -> None:
    s = schedule(every_secs=60, paused=True)
    assert resumed(s, 1000.5).next_tick == 1020
    assert not resumed(s, 1000.5).paused


def test_tick_keys_differ_by_tick_and_by_schedule_and_never_look_like_a_clients() -> None:
    a, b = schedule(uid="a"), schedule(uid="b")
    keys = {tick_key(a, 60), tick_key(a, 120), tick_key(b, 60)}
    assert len(keys) == 3
    assert all(k.startswith("schedule-") and len(k) == 41 for k in keys)


def request(**fields: Any) -> ScheduleRequest:
    base: dict[str, Any] = {"name": "nightly", "cron": "0 3 * * *", "job": {"command": "x"}}
    return msgspec.convert({**base, **fields}, ScheduleRequest)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "a/b"}, "invalid name"),
        ({"cron": "", "every_secs": 0}, "invalid cron/every_secs"),
        ({"every_secs": 60}, "invalid cron/every_secs"),
        ({"cron": "0 3 * *"}, "invalid cron"),
        ({"cron": "0 0 3 * * *"}, "invalid cron"),  # 6 fields (seconds) are not cron's
        ({"cron": "61 3 * * *"}, "invalid cron"),
        ({"cron": "0 0 30 2 *"}, "invalid cron"),
        ({"timezone": "Mars/Olympus"}, "invalid timezone"),
        ({"timezone": "../../etc/passwd"}, "invalid timezone"),
        ({"cron": "", "every_secs": 60, "timezone": PARIS}, "invalid timezone"),
        ({"cron": "", "every_secs": -5}, "invalid every_secs"),
        ({"catchup": "all"}, "invalid catchup"),
        ({"job": None}, "invalid job"),
        ({"job": {}}, "invalid job: command or deploy_url is required"),
        ({"job": {"command": "x", "job_type": "cron"}}, "invalid job: invalid job_type"),
        ({"job": {"command": "x", "env_vars": {"1X": "v"}}}, "invalid job: invalid env_vars"),
        ({"job": {"command": 5}}, "invalid job: command: must be a string, got an integer"),
    ],
)
def test_a_request_that_cannot_be_a_schedule_names_its_field(
    fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        new_schedule(request(**fields), "u", at("2026-03-01 10:00:00"))
    assert str(raised.value).startswith(named), str(raised.value)


def test_a_template_is_read_as_a_submit_is() -> None:
    """Go-style: keys in any case, null for absent; kept as the object of its set fields."""
    s = new_schedule(
        request(job={"COMMAND": "echo hi", "Env_Vars": {"A": "1"}, "port": None}),
        "u",
        at("2026-03-01 10:00:00"),
    )
    assert s.job == {"command": "echo hi", "env_vars": {"A": "1"}}
    assert utc(s.next_tick) == "2026-03-02 03:00:00"
    paused = new_schedule(request(paused=True), "u", at("2026-03-01 10:00:00"))
    assert paused.next_tick == 0 and "next_run_at" not in msgspec.to_builtins(view(paused))

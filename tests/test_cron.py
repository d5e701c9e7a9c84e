"""scheduler/models/cron.py: a cron expression cronsim refuses is said with its field, its
value and the field's range; and the guard on cronsim's messages it reads (not documented
past `Bad minute`: pyproject.toml caps cronsim, this fails when they change)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cronsim import CronSim, CronSimError

from scheduler.models.cron import CRON_FIELDS, cron_refusal
from scheduler.models.schedule import ScheduleRequest, new_schedule
from scheduler.models.wire import InvalidInput

NOW = datetime(2026, 3, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "said"),
    [
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("1,2,99 * * * *", "minute 99 is out of range 0-59"),
        ("5-70/2 * * * *", "minute 70 is out of range 0-59"),
        ("x * * * *", "minute 'x' is not a number: use 0-59"),
        ("*/0 * * * *", "minute step '0' is not a whole number above 0"),
        ("30-10 * * * *", "minute range 30-10 runs backwards: use low-high"),
        ("-1 * * * *", "bad minute '-1': use 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 3 0 * *", "day of month 0 is out of range 1-31"),
        ("0 3 32 * *", "day of month 32 is out of range 1-31"),
        ("0 3 30 2 *", "day of month '30' never comes in month '2'"),
        ("0 3 5#2 * *", "bad day of month '5#2': use 1-31"),
        ("0 3 * 13 *", "month 13 is out of range 1-12 or jan-dec"),
        ("0 3 * 0 *", "month 0 is out of range 1-12 or jan-dec"),
        ("0 3 * JAN-FOO *", "month 'FOO' is not a number nor a name: use 1-12 or jan-dec"),
        ("0 3 * * 8", "day of week 8 is out of range 0-7 or sun-sat"),
        ("0 3 * * 9L", "day of week 9 is out of range 0-7 or sun-sat"),
        ("0 3 * * funday", "day of week 'funday' is not a number nor a name: use 0-7 or sun-sat"),
        ("0 3 * * 1#6", "day of week '1#6': #N is the Nth such day of the month, 1-5"),
        ("0 3 * * 7-1", "day of week range 7-1 runs backwards: use low-high"),
        # Digits of other scripts (str.isdigit takes them, int() does not): a 500 they were.
        ("² * * * *", "minute '²' is not a number: use 0-59"),
        ("*/³ * * * *", "minute step '³' is not a whole number above 0"),
        ("0 3 * * 1#¹", "day of week '1#¹': #N is the Nth such day of the month, 1-5"),
        ("0 3 \u0661 * *", "day of month '\u0661' is not a number: use 1-31"),  # Arabic-Indic 1
    ],
)
def test_a_bad_cron_names_its_field_value_and_range(expr: str, said: str) -> None:
    request = ScheduleRequest(name="bad", cron=expr, job={"command": "x"})
    with pytest.raises(InvalidInput) as refused:
        new_schedule(request, "u", NOW.timestamp())
    assert str(refused.value) == f"invalid cron {expr!r}: {said}"


def test_what_names_no_field_is_said_as_cronsim_says_it() -> None:
    assert cron_refusal("* * * *", "Wrong number of fields") == "Wrong number of fields"


@pytest.mark.parametrize(("at", "bad"), list(enumerate(["61", "24", "32", "13", "8"])))
def test_cronsim_says_bad_and_the_field_as_models_cron_reads_it(at: int, bad: str) -> None:
    """The guard: cronsim documents CronSimError and shows `Bad minute`; the other fields'
    words are its code's. A change here: re-read cronsim's messages (cronsim/cronsim.py,
    Field.msg), fix CRON_FIELDS' cronsim_name, then move pyproject.toml's cap."""
    fields = ["0", "3", "*", "*", "*"]
    fields[at] = bad
    with pytest.raises(CronSimError) as refused:
        next(CronSim(" ".join(fields), NOW))
    assert str(refused.value) == f"Bad {CRON_FIELDS[at].cronsim_name}"

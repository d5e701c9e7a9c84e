"""A cron expression's refusal said with its field, its value and the field's range (`minute
61 is out of range 0-59`), where cronsim says only the field (`Bad minute`).

cronsim judges the expression; this module only words its refusal. cronsim documents that a
bad expression raises CronSimError, and shows `Bad minute` as its message; the other
fields' words (`Bad day-of-month`...) are its code's (cronsim.cronsim.FIELD_NAMES), not
documented: pyproject.toml caps cronsim to the minor version they were read from, and
tests/test_cron.py fails when its messages differ. A message not known here is said as
cronsim says it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CronField:
    """A field of a 5-field cron expression: its name in messages, cronsim's name of it,
    its values, and the names it takes for them (`jan`..., `sun`...)."""

    name: str
    cronsim_name: str
    low: int
    high: int
    names: str = ""

    @property
    def range(self) -> str:
        """`0-59`, `1-12 or jan-dec`."""
        return f"{self.low}-{self.high}" + (f" or {self.names}" if self.names else "")


# In an expression's order: minute hour day-of-month month day-of-week (0 and 7: Sunday).
CRON_FIELDS = (
    CronField("minute", "minute", 0, 59),
    CronField("hour", "hour", 0, 23),
    CronField("day of month", "day-of-month", 1, 31),
    CronField("month", "month", 1, 12, "jan-dec"),
    CronField("day of week", "day-of-week", 0, 7, "sun-sat"),
)
# cronsim's message for a bad field: `Bad minute`.
_CRONSIM_SAYS = {f"Bad {field.cronsim_name}": at for at, field in enumerate(CRON_FIELDS)}
_NAMES = {
    "month": {"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"},
    "day of week": {"sun", "mon", "tue", "wed", "thu", "fri", "sat"},
}
# Days of the month as numbers and ranges of them (`30`, `30,31`, `29-31`).
_DAYS = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
# A term of a field: a value or a range of them (`*`, `5`, `1-5`, `mon-fri`), then a step.
_TERM = re.compile(r"(?P<range>[^/]*)(?:/(?P<step>.*))?")


def cron_refusal(expr: str, said: str) -> str:
    """What is wrong with `expr`, a 5-field expression cronsim refused saying `said`: the
    field, its bad value and its range when they can be told, else the field and its range;
    `said` itself when it names no field known here."""
    at = _CRONSIM_SAYS.get(said)
    if at is None:
        return said
    field, text = CRON_FIELDS[at], expr.split()[at]
    said = _bad_value(field, text)
    if not said and field.name == "day of month" and _DAYS.fullmatch(text):
        # Each value is a day, but none comes in the months given (`30 2`: February's 30th).
        return f"day of month {text!r} never comes in month {expr.split()[3]!r}"
    return said or f"bad {field.name} {text!r}: use {field.range}"


def _bad_value(field: CronField, text: str) -> str:
    """The first value of the field's `text` that cannot be one, said with the range ("" when
    each value is one: it is the terms' shape, or which days a month has)."""
    for term in text.split(","):
        found = _TERM.fullmatch(term)
        assert found is not None  # any text is a range, then maybe a step
        step = found["step"]
        if step is not None and not (_digits(step) and int(step) > 0):
            return f"{field.name} step {step!r} is not a whole number above 0"
        ends = found["range"].split("-") if found["range"] != "*" else []
        for value in ends:
            value, nth = value.split("#", 1) if "#" in value else (value, "1")
            said = _bad_one(field, value)
            if said:
                return said
            if field.name == "day of week" and not (_digits(nth) and 1 <= int(nth) <= 5):
                return f"{field.name} {term!r}: #N is the Nth such day of the month, 1-5"
        if len(ends) == 2 and all(_digits(end) for end in ends) and int(ends[0]) > int(ends[1]):
            return f"{field.name} range {found['range']} runs backwards: use low-high"
    return ""


def _digits(text: str) -> bool:
    """Whether `text` is a number as cron writes one: ASCII digits (str.isdigit also takes
    "²", which int() refuses: a 500 where the refusal was meant)."""
    return _ASCII_DIGITS.fullmatch(text) is not None


_ASCII_DIGITS = re.compile(r"[0-9]+")


def _bad_one(field: CronField, value: str) -> str:
    bare = value.lower().removesuffix("l")  # `5L`: the last Friday
    if not bare or bare in _NAMES.get(field.name, ()):
        return ""  # a name, or none (L): what cronsim's own reading says is wrong with it
    if not _digits(bare):
        also = " nor a name" if field.names else ""
        return f"{field.name} {value!r} is not a number{also}: use {field.range}"
    if not field.low <= int(bare) <= field.high:
        return f"{field.name} {int(bare)} is out of range {field.range}"
    return ""

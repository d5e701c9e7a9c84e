"""A setting's value from its text (by the field's type: `PARSERS`) and its bounds, each
refusal a ConfigError naming the variable."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from scheduler.config.errors import ConfigError

T = TypeVar("T")


def at_least(name: str, value: float, low: float) -> None:
    if value < low:
        raise ConfigError(f"{name}: {value} is below the minimum {low}")


def at_most(name: str, value: float, high: float) -> None:
    if value > high:
        raise ConfigError(f"{name}: {value} is above {high}")


def _parse(kind: Callable[[str], T]) -> Callable[[str, str], T]:
    def parse(name: str, raw: str) -> T:
        try:
            value = kind(raw.strip())
        except ValueError:
            raise ConfigError(f"{name}: {raw!r} is not a valid {kind.__name__}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: {raw!r} is not a finite number")
        return value

    return parse


def _text(_name: str, raw: str) -> str:
    return raw.strip()


PARSERS: dict[Any, Callable[[str, str], Any]] = {
    "str": _text,
    "int": _parse(int),
    "float": _parse(float),
}

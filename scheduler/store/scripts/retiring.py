"""The scripts that retire an old release's function library (ops.upkeep.retire_libraries): the
worker's sweep marks its own in use and reads the libraries no process has marked for the
grace (RETIRED_LIBRARIES), deletes them, then forgets them (FORGET_LIBRARIES). Each with its call.
The API's processes mark theirs with their request metrics (metrics.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Retired:
    """Redis's time (s) when the libraries were read, and the libraries unmarked since
    before that less the grace."""

    now: int
    names: list[str]


def _retired(reply: list[Any]) -> Retired:
    return Retired(int(reply[0]), [str(name, "utf-8") for name in reply[1:]])


RETIRED_LIBRARIES = Script("RETIRED_LIBRARIES", "library grace limit", _retired)


def retired_libraries(library: str, grace: float, limit: int) -> Call[Retired]:
    return RETIRED_LIBRARIES.call(library=library, grace=grace, limit=limit)


FORGET_LIBRARIES = Script("FORGET_LIBRARIES", "cutoff *names", int)


def forget_libraries(cutoff: float, names: Sequence[str]) -> Call[int]:
    return FORGET_LIBRARIES.call(cutoff=cutoff, names=names)

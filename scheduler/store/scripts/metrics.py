"""The request metrics every API process adds to the deployment's (api/metrics.py): one
script, which adds a process's counts since its last call and may read the sums back, and
marks the function library the process runs in use (store/retire.py)."""

from __future__ import annotations

from typing import Any

from scheduler.store.scripts import functions
from scheduler.store.scripts.script import Call, Script


def _sums(reply: list[Any]) -> dict[str, float]:
    return {str(reply[i], "utf-8"): float(reply[i + 1]) for i in range(0, len(reply), 2)}


ADD_REQUEST_STATS = Script(
    "ADD_REQUEST_STATS",
    "read library *deltas",
    _sums,
)


def add_request_stats(deltas: dict[str, float], read: bool) -> Call[dict[str, float]]:
    flat: list[Any] = []
    for name, delta in deltas.items():
        flat += [name, repr(delta)]
    library = functions.library().name
    return ADD_REQUEST_STATS.call(read="1" if read else "0", library=library, deltas=flat)

"""Every Lua script of the scheduler, each one `Script` object (script.py) defined once with
its call: the request path's (jobs.py, listing.py), the built-in registry's (nodes.py), the
UI's and /metrics' (overview.py), the background work's (upkeep.py), the snapshot's
(snapshot.py) and the schedules' (schedules.py), on the shared Lua of library.py and
life.py.

`SCRIPTS` holds them all, by name, once this package is imported."""

from scheduler.store.scripts import (
    jobs,
    listing,
    metrics,
    nodes,
    overview,
    schedules,
    snapshot,
    upkeep,
)
from scheduler.store.scripts.script import SCRIPTS, Call, Script

__all__ = [
    "SCRIPTS",
    "Call",
    "Script",
    "jobs",
    "listing",
    "metrics",
    "nodes",
    "overview",
    "schedules",
    "snapshot",
    "upkeep",
]

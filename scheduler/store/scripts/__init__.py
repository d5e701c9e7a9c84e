"""Every Lua script of the scheduler, each one `Script` object (script.py) defined once with
its call: the request path's (jobs.py, listing.py), the built-in registry's (nodes.py), the
background work's (upkeep.py), the snapshot's (snapshot.py) and the schedules'
(schedules.py), the door's (access.py: UI sessions, failed credentials), on the shared
Lua of library.py and life.py.

`SCRIPTS` holds them all, by name, once this package is imported."""

from scheduler.store.scripts import access, jobs, listing, nodes, schedules, snapshot, upkeep
from scheduler.store.scripts.script import SCRIPTS, Call, Script

__all__ = [
    "SCRIPTS",
    "Call",
    "Script",
    "access",
    "jobs",
    "listing",
    "nodes",
    "schedules",
    "snapshot",
    "upkeep",
]

"""Every Lua script of the scheduler, each one `Script` object (script.py) defined once with
its call, its Lua in lua/<name>.lua: the request path's (create.py, jobs.py, listing.py),
the built-in registry's (nodes.py; services.py), either registry's drains (drains.py), the
UI's and /metrics' (overview.py, metrics.py; series.py, the dashboard's), the background
work's (upkeep.py; settling.py, the endings left to settle), the snapshot's (snapshot.py),
the schedules' (schedules.py), the quotas' (quotas.py), the door's (access.py: UI sessions,
failed credentials) and the retiring of old function libraries' (retiring.py),
on the shared Lua of lua/includes/ (library.py: a job's life, its ending, placement, the
dashboard's minutes...) and the Lua generated from Python facts (generated.py).

`SCRIPTS` holds them all, by name, once this package is imported."""

from scheduler.store.scripts import (
    access,
    create,
    drains,
    functions,
    jobs,
    layout,
    listing,
    logs,
    metrics,
    nodes,
    overview,
    quotas,
    retiring,
    schedules,
    series,
    services,
    settling,
    snapshot,
    upkeep,
)
from scheduler.store.scripts.script import SCRIPTS, Call, Script

functions.library()  # names every script's function, once all are defined

__all__ = [
    "SCRIPTS",
    "Call",
    "Script",
    "access",
    "create",
    "drains",
    "functions",
    "jobs",
    "layout",
    "listing",
    "logs",
    "metrics",
    "nodes",
    "overview",
    "quotas",
    "retiring",
    "schedules",
    "series",
    "services",
    "settling",
    "snapshot",
    "upkeep",
]

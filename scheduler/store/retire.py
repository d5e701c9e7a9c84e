"""An old release's function library deleted once no process uses it (docs/UPGRADING.md).

Each release's scripts are one Redis function library named after a hash of its text
(scripts/functions.py), so two releases beside each other in a rolling upgrade each run
their own; without this every release would leave its library (~130 KB) in Redis. Each
process marks the library it runs in `{P}:libraries`, with Redis's time: a worker at every
sweep (SWEEP_INTERVAL_SECS), an API process at every flush of its request metrics
(METRICS_FLUSH_SECS, while it serves requests). The sweep deletes the libraries unmarked for
LIBRARY_GRACE_SECS. Deleting one a process still runs (an API process idle past the grace,
a process of another deployment on the same Redis) costs that process one round trip: its
next call finds the function missing and loads the library again, as after a Redis restart
(JobStore.run, SyncJobStore.run), and its next mark keeps it.
"""

from __future__ import annotations

import logging

from redis.exceptions import ResponseError

from scheduler.store.scripts import functions, retiring
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger(__name__)

# How long a library stays after the last mark of a process that runs it: well past the
# marks' periods (seconds) and a rolling upgrade's minutes.
LIBRARY_GRACE_SECS = 3600
# Libraries deleted by one sweep at most (one FUNCTION DELETE each).
LIBRARIES_PER_SWEEP = 10


def retire_libraries(store: SyncJobStore, grace: float = LIBRARY_GRACE_SECS) -> list[str]:
    """Marks this process's library in use, deletes those unmarked for `grace` seconds and
    forgets them; returns the names deleted (or found gone already)."""
    own = functions.library().name
    retired = store.run(retiring.retired_libraries(own, grace, LIBRARIES_PER_SWEEP))
    for name in retired.names:
        try:
            store.redis.function_delete(name)
        except ResponseError as exc:
            if "library not found" not in str(exc).lower():
                raise
    if retired.names:
        store.run(retiring.forget_libraries(retired.now - grace, retired.names))
    return retired.names

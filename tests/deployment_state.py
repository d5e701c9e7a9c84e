"""What an attack could change: every key of a deployment with its value (DUMP), for tests
that assert a refused request changed nothing.

The request metrics (`{P}:stats:requests`) are never part of it: every request adds to them,
refused ones too, and each API process flushes them on its own timer
(METRICS_FLUSH_SECS), so a flush of the fixture's own requests can land between a test's
two reads; nor the marks of the function libraries in use (`{P}:libraries`), which the same
flush and the worker's sweep set (ops.upkeep.retire_libraries). Nor are the counts of wrong
credentials (`{P}:authfail:<address>`): every refused credential adds to them, on purpose
(api/guesses.py); a test of the count reads it itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from scheduler.store.keys import Keys


def deployment_state(
    client: redis.Redis, prefix: str, leave_out: Callable[[bytes], bool] = lambda key: False
) -> dict[bytes, Any]:
    """Every key of deployment `prefix` but the request metrics, the libraries' marks, the
    counts of wrong credentials and those `leave_out` names."""
    keys = Keys(prefix)
    counters = {keys.request_stats.encode(), keys.libraries.encode()}
    failures = keys.auth_failures("").encode()
    found = client.scan_iter(match=keys.pattern(), count=1000)
    return {
        key: client.dump(key)
        for key in sorted(found)
        if key not in counters and not key.startswith(failures) and not leave_out(key)
    }

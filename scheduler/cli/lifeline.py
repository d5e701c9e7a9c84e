"""Child processes that end with their parent, kill -9 included: `scheduler up`'s children
and `scheduler serve --workers N`'s API processes.

Why: a supervisor killed with SIGKILL runs no cleanup, and uvicorn's worker processes, left
orphaned, kept the port open: a restart of `serve` on the same port then failed with
"Address already in use" until someone found and killed them. Linux's PR_SET_PDEATHSIG has
the kernel send a signal to a child when its parent dies, however it dies. SIGTERM, so the
child stops as on a normal shutdown: it closes its listening socket at once (a new `serve`
can bind the port) and lets running requests finish within uvicorn's graceful timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Any

from starlette.applications import Starlette

PR_SET_PDEATHSIG = 1
# The pid of the `serve` whose API processes these are: a process whose parent died before
# it asked for the signal is an orphan already, and must not serve.
SERVE_PID_ENV = "SCHEDULER_SERVE_PID"


def _libc_prctl() -> Any:
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError):
        return ctypes.CDLL(name, use_errno=True).prctl
    return None


_prctl = _libc_prctl()


def end_with_parent(sig: signal.Signals = signal.SIGTERM) -> bool:
    """Ask the kernel for `sig` when this process's parent dies; False where it cannot
    (not Linux)."""
    if _prctl is None:
        return False
    return bool(_prctl(PR_SET_PDEATHSIG, sig) == 0)


def orphaned(parent_pid: int) -> bool:
    """Whether the parent this process was started by is gone already (it was reparented)."""
    return parent_pid > 0 and os.getppid() != parent_pid


def serve_worker_app() -> Starlette:
    """The app factory of `serve --workers N`'s API processes (uvicorn starts each from it):
    the app, in a process that ends with `serve`."""
    from scheduler.api.app import create_app

    end_with_parent()
    if orphaned(int(os.environ.get(SERVE_PID_ENV) or 0)):
        raise SystemExit("scheduler serve: its supervisor is gone; this API process stops")
    return create_app()

"""Child processes that end with their parent, kill -9 included: `scheduler up`'s children
and `scheduler serve --workers N`'s API processes.

Why: a supervisor killed with SIGKILL runs no cleanup, and uvicorn's worker processes, left
orphaned, kept the port open: a restart of `serve` on the same port then failed with
"Address already in use" until someone found and killed them. Linux's PR_SET_PDEATHSIG has
the kernel send a signal to a child when its parent dies, however it dies. SIGTERM, so the
child stops as on a normal shutdown: it closes its listening socket at once (a new `serve`
can bind the port) and lets running requests finish within uvicorn's graceful timeout.

The signal begins a stop; it does not bound one. A process that did not act on it (a start-up
not finished, a lifespan's shutdown awaiting a task that lost its cancel) lived on, and uvicorn's
supervisor waits for its processes without end: `serve`, its resource tracker and an API process
outlived a killed `up`. So a process that ends with its parent also watches for its parent's
death (end_within), and ORPHAN_GRACE_SECS after it kills its own children and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2
# An orphan's time to stop on its own: uvicorn's graceful timeout for requests (main.py's
# GRACEFUL_SHUTDOWN_SECS, 5 s), then the lifespan's shutdown and the interpreter's exit.
ORPHAN_GRACE_SECS = 15.0
ORPHAN_POLL_SECS = 0.2  # how often the watch looks for its parent
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


def parent_death_signal() -> int:
    """The signal this process gets when its parent dies (end_with_parent, or inherited
    through exec from the child_setup of `up`'s children); 0 for none."""
    if _prctl is None:
        return 0
    sig = ctypes.c_int(0)
    if _prctl(PR_GET_PDEATHSIG, ctypes.byref(sig)) != 0:
        return 0
    return sig.value


def orphaned(parent_pid: int) -> bool:
    """Whether the parent this process was started by is gone already (it was reparented)."""
    return parent_pid > 0 and os.getppid() != parent_pid


def end_within(parent_pid: int, grace: float = ORPHAN_GRACE_SECS) -> threading.Thread:
    """A watch, in a daemon thread, that ends this process `grace` seconds after `parent_pid`
    is gone if it has not ended by then: its children killed (SIGKILL; an API process of
    `serve` that did not stop, the resource tracker), then os._exit, whatever the main thread
    waits for. Its parent's death sent it the signal that begins a graceful stop."""

    def watch() -> None:
        while not orphaned(parent_pid):
            time.sleep(ORPHAN_POLL_SECS)
        time.sleep(grace)
        children = _children(os.getpid())
        print(
            f"scheduler: its parent (pid {parent_pid}) is gone and it did not stop within "
            f"{grace:g} s: killing its processes {children} and exiting",
            file=sys.stderr,
            flush=True,
        )
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(1)

    thread = threading.Thread(target=watch, name="lifeline", daemon=True)
    thread.start()
    return thread


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from /proc/*/stat (not every kernel has
    /proc/PID/task/TID/children)."""
    found: list[int] = []
    if not Path("/proc").is_dir():  # not Linux: the watch only exits
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # After the command's closing parenthesis: the state, then the parent's pid.
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def serve_worker_app() -> Starlette:
    """The app factory of `serve --workers N`'s API processes (uvicorn starts each from it):
    the app, in a process that ends with `serve`."""
    from scheduler.api.app import create_app

    end_with_parent()
    serve_pid = int(os.environ.get(SERVE_PID_ENV) or 0)
    if orphaned(serve_pid):
        raise SystemExit("scheduler serve: its supervisor is gone; this API process stops")
    if serve_pid > 0:
        end_within(serve_pid)
    return create_app()

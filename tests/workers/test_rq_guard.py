"""SchedulerWorker.handle_exception (workers/worker.py) overrides an rq method rq does not
document as a hook: for a RoutineFailure it logs one line instead of rq's ERROR with the
traceback, says whether rq will retry the job (and when) from the job's retry state, and runs
rq's exception handlers itself. pyproject.toml caps rq to its major version; this test fails
when the installed rq differs in anything that override relies on, naming the member and what
to re-check.

How complete: only what handle_exception relies on (each member's sha256 as in rq 3.0.0, as
tests/guards.py digests it), and that rq calls handle_exception from one place, before
handle_job_failure. SchedulerWorker's other overrides (its Redis outage handling) are not
covered here; tests/workers/test_outage.py exercises them.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import rq
from rq import job_lifecycle
from rq.job import Job
from rq.worker.base import BaseWorker

from tests.guards import member_digest, sha256
from workers.worker import SchedulerWorker

CLASSES: dict[str, type] = {"BaseWorker": BaseWorker, "Job": Job}

# member -> (sha256 as in rq 3.0.0, what to re-check in SchedulerWorker.handle_exception)
GUARDED: dict[str, tuple[str, str]] = {
    "BaseWorker.handle_exception": (
        "fffd9b2925ac14324e814e4b203a93984a647829fc900eec02a5917033c5a643",
        "that it still only logs and runs the exception handlers (what ours does instead)",
    ),
    "BaseWorker._finalize_failure": (
        "6d1b8bd1117e9641bbf8373fa3df3dcd77f55fe973de0fa59c917a46839102a5",
        "that handle_exception runs before handle_job_failure retries the job (so the job's "
        "retries_left still counts the coming retry)",
    ),
    "BaseWorker.handle_job_failure": (
        "7432afe53b9f84ec4dd8fe26da67066658dfbbf5dafa0377a65e1ee1c6cb5337",
        "that rq retries the job when job.should_retry (our WARNING) and fails it otherwise "
        "(our ERROR)",
    ),
    "BaseWorker._exc_handlers": (
        "7d6fc43331a88a98e21bb09e1ce4e6635efc8cc89269b7a6ec4e58780822fc50",
        "the exception handler stack ours runs",
    ),
    "Job.should_retry": (
        "cf765572a37a3d7effe5f1a01b3e41d7e66f6a1e2213b889ccb0b9380a2732f7",
        "the retry decision (WARNING or ERROR)",
    ),
    "Job.get_retry_interval": (
        "c339cc6fc527e4b264b2f712173d2f25ab3792054c44c7732d0a7b9b03f80f7c",
        "the delay the WARNING line gives",
    ),
    "Job.retry": (
        "4a0f7cec2323d8a5a96b9f8fe13251c7e07b4b6a515dd18c964ef4d8fd6b54cf",
        "the interval and retries remaining the WARNING line gives (computed as this does)",
    ),
    "job_lifecycle.call_exception_handlers": (
        "37423ee26d84229c37d8b03b7211c82f0d74de5a43e92e73418e7afa500d73e6",
        "how ours runs the exception handlers (as rq's handle_exception does)",
    ),
}


def digest(member: str) -> str:
    owner, name = member.split(".")
    if owner == "job_lifecycle":
        return sha256(inspect.getsource(getattr(job_lifecycle, name)))
    cls = CLASSES[owner]
    found = cls.__dict__.get(name)
    if isinstance(found, property):
        assert found.fget is not None
        return sha256(inspect.getsource(found.fget))
    return member_digest(cls, name)


def callers_of(method: str) -> set[str]:
    """The functions of rq's source that call `<something>.<method>(...)`, as
    `<file>:<function>`."""
    root = Path(rq.__file__).parent
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == method
                ):
                    found.add(f"{path.relative_to(root)}:{function.name}")
    return found


def test_rq_is_the_version_handle_exception_was_written_against() -> None:
    changed = [
        f"{member}: changed in this rq ({rq.__version__}); re-check {what}"
        for member, (expected, what) in sorted(GUARDED.items())
        if digest(member) != expected
    ]
    assert not changed, "\n".join(changed)


def test_rq_reports_a_job_failure_only_through_finalize_failure() -> None:
    assert callers_of("handle_exception") == {"worker/base.py:_finalize_failure"}
    source = textwrap.dedent(inspect.getsource(BaseWorker._finalize_failure))
    assert source.index("self.handle_exception(") < source.index("self.handle_job_failure(")
    # No rq class between ours and BaseWorker changes how a failure is reported.
    for name in ("handle_exception", "_finalize_failure", "handle_job_failure", "perform_job"):
        owners = [cls for cls in SchedulerWorker.__mro__ if name in vars(cls)]
        assert next(c for c in owners if c is not SchedulerWorker) is BaseWorker, (name, owners)


def test_the_guard_sees_a_change() -> None:
    expected, _ = GUARDED["BaseWorker.handle_exception"]
    source = inspect.getsource(BaseWorker.handle_exception)
    assert sha256(source) == expected
    assert sha256(source + "\n") != expected
    assert "worker/base.py:perform_job" in callers_of("_finalize_failure")  # the scan finds

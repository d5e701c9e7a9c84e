"""`scheduler up`'s supervisor: its children started, restarted after a backoff when one dies
(1 s, doubling to RESTART_CAP_SECS; back to 1 s once it had run RESTART_STABLE_SECS), and
stopped in order (agent, worker, API), each stop that waits saying what it waits for."""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from scheduler.cli.embedded import child_setup_of_this_process

log = logging.getLogger("scheduler.up")

STOP_TIMEOUTS = {"worker": 20.0, "api": 10.0}  # the agent's: its grace period + 15 s
# A child not stopped this long after its SIGTERM: `up` says what it waits for (its log names
# the jobs; a second Ctrl-C kills it).
SAY_AFTER_SECS = 2.0
WAITS_FOR = {
    "agent": "its running jobs get AGENT_GRACE_SECS ({grace:g} s) to finish, then are killed "
    "and reported",
    "worker": "the task under way ends (a snapshot, a sweep)",
    "api": "the requests under way end",
}
Child = subprocess.Popen[bytes]
RESTART_FIRST_SECS, RESTART_CAP_SECS = 1.0, 30.0
RESTART_STABLE_SECS = 60.0  # a child that ran this long before dying starts a fresh backoff


def restart_delay(failures: int) -> float:
    """Seconds before the restart that follows `failures` quick deaths in a row (1, 2, 3 …)."""
    return float(min(RESTART_CAP_SECS, RESTART_FIRST_SECS * 2 ** (failures - 1)))


@dataclass
class Supervisor:
    env: dict[str, str]
    agent_grace_secs: float = 30.0
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    signals: int = 0
    launchers: dict[str, Callable[[], Child]] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # quick deaths in a row
    restart_due: dict[str, float] = field(default_factory=dict)  # dead children: when

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Run `scheduler ARGS` as child `name`."""
        cmd = [sys.executable, "-m", "scheduler", *args]
        return self.adopt(name, functools.partial(self._spawn, cmd))

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        setup = child_setup_of_this_process()
        return subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL, preexec_fn=setup)

    def adopt(self, name: str, launch: Callable[[], Child]) -> subprocess.Popen[bytes]:
        """Run `launch()` as child `name`, and again whenever it dies (see check)."""
        return self.watch(name, launch(), launch)

    def watch(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        launch: Callable[[], Child],
    ) -> subprocess.Popen[bytes]:
        self.children[name], self.launchers[name] = proc, launch
        self.started_at[name] = time.monotonic()
        return proc

    def check(self, now: float) -> None:
        """Schedule a restart of each child that died, and restart those whose time came.
        One dying child (a worker that lost Redis, an API killed by the OOM killer) must not
        take the whole deployment down."""
        for name, proc in list(self.children.items()):
            code = proc.poll()
            if code is None:
                continue
            due = self.restart_due.get(name)
            if due is None:
                ran = now - self.started_at.get(name, now)
                failures = 1 if ran >= RESTART_STABLE_SECS else self.failures.get(name, 0) + 1
                self.failures[name] = failures
                delay = restart_delay(failures)
                self.restart_due[name] = now + delay
                log.error("%s exited with status %d: restarting it in %.0f s", name, code, delay)
            elif now >= due:
                del self.restart_due[name]
                self.adopt(name, self.launchers[name])
                log.warning("%s restarted (pid %d)", name, self.children[name].pid)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals > 1:  # a second Ctrl-C: do not wait any more
            for name, proc in self.children.items():
                if name == "redis":  # stopped last, gracefully (embedded_redis)
                    continue
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

    def stop_all(self) -> None:
        for name in ("agent", "worker", "api"):
            proc = self.children.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            timeout = STOP_TIMEOUTS.get(name, self.agent_grace_secs + 15)
            if not self._stopped(proc, min(SAY_AFTER_SECS, timeout)):
                log.info(
                    "waiting up to %.0f s more for the %s to stop: %s (Ctrl-C again: kill it now)",
                    timeout - SAY_AFTER_SECS,
                    name,
                    WAITS_FOR.get(name, "").format(grace=self.agent_grace_secs),
                )
            if not self._stopped(proc, max(0.0, timeout - SAY_AFTER_SECS)):
                log.warning("%s did not stop in time: killing it", name)
                proc.kill()
                proc.wait()

    @staticmethod
    def _stopped(proc: Child, within: float) -> bool:
        try:
            proc.wait(within)
        except subprocess.TimeoutExpired:
            return False
        return True

"""How the agent runs a job: the process, its limits, its bounded output, and deploy archives.

The protocol side (register, poll, claim, report) is in loop.py and remote.py; this module only
turns a job into an `Outcome` (exit code, stdout, stderr), or into a running `Service`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import httpx
import msgspec

from scheduler.agent.capacity import Ask, limits_for
from scheduler.agent.deploy import DeployError, download, extract
from scheduler.agent.limits import Backend, Confinement, Limits, wrapper_command
from scheduler.models.job import JOB_FIELDS, Job

log = logging.getLogger("scheduler.agent")

# Not handed down to jobs: the agent's own credentials and the scheduler's store. The join
# key registers any node id it likes: a job holding it could register a node of its own and
# receive other users' jobs with their env_vars.
SECRET_ENV = frozenset({"TINYAWS_API_KEY", "AGENT_JOIN_KEY", "REDIS_URL"})
NO_START_SCRIPT = "no start script or tinyaws.build found in deploy archive"
KILL_GRACE_SECS = 5.0
DRAIN_SECS = 2.0
EXIT_POLL_SECS = 0.05


# A polled job as the agent reads it: its id and what a client may submit (the Job fields
# marked SUBMITTED), each optional (agents treat every field but job_id and command as
# optional, CONTRACT 2.2). Every other field of the wire job is ignored, whatever its type:
# the agent may poll a scheduler that writes them otherwise. For the type checker it is a Job,
# whose fields it reads with the same types.
if TYPE_CHECKING:
    AgentJob = Job
else:
    AgentJob = msgspec.defstruct(
        "AgentJob",
        [
            (f.name, f.annotation) if f.name == "job_id" else (f.name, f.annotation, f.empty)
            for f in JOB_FIELDS
            if f.name == "job_id" or f.submitted
        ],
        kw_only=True,
        module=__name__,
    )


# What a job's stderr ends with when it was stopped before it ended: by the agent stopping
# (or, for a service, its stop), or by the operator's cancel (the loop's, which knows why).
ABORTED_NOTE = "agent stopped before the job finished\n"
SERVICE_ABORTED_NOTE = "agent stopped the service\n"
CANCELLED_NOTE = "cancelled by operator\n"


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    cancelled: bool = False  # stopped because the scheduler cancelled the job

    @property
    def status(self) -> str:
        if self.cancelled:
            return "cancelled"
        return "done" if self.exit_code == 0 else "failed"


@dataclass(frozen=True, slots=True)
class ExecConfig:
    work_dir: Path
    backend: Backend
    run_limits: Limits
    service_limits: Limits
    output_limit: int
    timeout_secs: float
    deploy_max_bytes: int


class BoundedBuffer:
    """The first `limit` bytes of a stream, and a count of the rest, so that a job printing
    gigabytes costs the agent `limit` bytes of memory."""

    MARKER = "\n[output truncated by the agent: {dropped} bytes dropped]\n"
    MARKER_ROOM = 80  # the marker's longest length, kept free within the scheduler's cap

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit - self.MARKER_ROOM)
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        text = self.data.decode(errors="replace")
        encoded = text.encode()
        if len(encoded) > self.limit:  # replacement characters are wider than what they replace
            text = encoded[: self.limit].decode(errors="ignore")
        if self.dropped:
            text += self.MARKER.format(dropped=self.dropped)
        return text


class OutputTee(Protocol):
    """Where a run job's output also goes as it is read, besides its bounded capture (the
    live output, live_output.py). `feed` must not wait: the pipes are drained meanwhile."""

    def feed(self, stream: str, chunk: bytes) -> None: ...


def tail(path: Path, limit: int) -> str:
    """The last `limit` bytes of a file (a service log), as text."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return ""
    dropped = size - len(data)
    head = f"[{dropped} earlier bytes of the log dropped]\n" if dropped else ""
    return head + data.decode(errors="replace")


def job_env(job: AgentJob, base: dict[str, str] | None = None) -> dict[str, str]:
    """The agent's environment without its secrets, then PORT for services, then env_vars."""
    source = dict(os.environ) if base is None else base
    env = {name: value for name, value in source.items() if name not in SECRET_ENV}
    if job.port:
        env["PORT"] = str(job.port)
    env.update(job.env_vars)
    return env


def exit_code(returncode: int | None) -> int:
    """The job's exit code; killed by signal n, 128+n, as shells report it (the original
    agent's -1 lost which signal), and `signal_note` says so in its stderr."""
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


def signal_note(returncode: int | None) -> str:
    """A line for the stderr of a job killed by a signal: `signal: SIGKILL (exit_code 137)`."""
    if returncode is None or returncode >= 0:
        return ""
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"signal: {name} (exit_code {128 - returncode})\n"


def kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def exited(proc: asyncio.subprocess.Process) -> int:
    """The exit status, as soon as the process has exited. (Process.wait() also waits for its
    pipes to close, which a background child of the job can delay for ever.)"""
    while proc.returncode is None:
        await asyncio.sleep(EXIT_POLL_SECS)
    return proc.returncode


async def stop_process(proc: asyncio.subprocess.Process, conf: Confinement) -> int:
    """SIGTERM the job's process group, SIGKILL it after a grace period; the exit status."""
    kill_group(proc.pid, signal.SIGTERM)
    try:
        return await asyncio.wait_for(exited(proc), KILL_GRACE_SECS)
    except TimeoutError:
        kill_group(proc.pid, signal.SIGKILL)
        conf.kill_all()
        return await exited(proc)


async def _drain(
    stream: asyncio.StreamReader | None, sink: BoundedBuffer, tee: OutputTee | None, name: str
) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        sink.feed(chunk)
        if tee is not None:
            tee.feed(name, chunk)


async def _wait_or_abort(
    proc: asyncio.subprocess.Process, abort: asyncio.Event, timeout: float | None
) -> str:
    """ "exited", "timeout" or "aborted"."""
    waiter = asyncio.ensure_future(exited(proc))
    stopper = asyncio.ensure_future(abort.wait())
    try:
        done, _ = await asyncio.wait(
            {waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopper.cancel()
    if waiter in done:
        return "exited"
    waiter.cancel()
    return "aborted" if stopper in done else "timeout"


async def capture(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    conf: Confinement,
    output_limit: int,
    timeout: float | None,
    abort: asyncio.Event,
    tee: OutputTee | None = None,
) -> Outcome:
    """Run `argv` in its own process group and return its exit code and bounded output (its
    output also fed to `tee` as it is read). Processes it leaves behind are killed once it
    exits."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *wrapper_command(conf, argv),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return Outcome(-1, "", f"spawn failed: {exc}")
    out, err = BoundedBuffer(output_limit), BoundedBuffer(output_limit)
    readers = [
        asyncio.create_task(_drain(proc.stdout, out, tee, "stdout")),
        asyncio.create_task(_drain(proc.stderr, err, tee, "stderr")),
    ]
    ended = await _wait_or_abort(proc, abort, timeout)
    status = proc.returncode if ended == "exited" else await stop_process(proc, conf)
    code = exit_code(status)
    # Background children may hold the pipes open: give them a moment, then kill them.
    _, pending = await asyncio.wait(readers, timeout=DRAIN_SECS)
    kill_group(proc.pid, signal.SIGKILL)
    conf.kill_all()
    if pending:
        await asyncio.wait(pending, timeout=DRAIN_SECS)
        for task in pending:
            task.cancel()
    if ended != "exited":
        code = -1
    return Outcome(code, out.text(), err.text() + _notes(ended, conf, status))


def _notes(ended: str, conf: Confinement, status: int | None) -> str:
    """Why the job ended as it did: stopped by the agent (its code -1), else the signal that
    killed it, and an OOM kill."""
    if ended == "timeout":
        return "job timed out\n"
    if ended == "aborted":
        return ABORTED_NOTE
    oom = "agent: the job was killed for exceeding its memory limit\n" if conf.oom_killed() else ""
    return signal_note(status) + oom


@dataclass
class Service:
    """A running service job: detached, logging to a file, reported when it exits."""

    job: AgentJob
    proc: asyncio.subprocess.Process
    conf: Confinement
    run_dir: Path
    owns_dir: bool
    output_limit: int

    async def wait(self, abort: asyncio.Event) -> Outcome:
        ended = await _wait_or_abort(self.proc, abort, None)
        code = (
            self.proc.returncode if ended == "exited" else await stop_process(self.proc, self.conf)
        )
        kill_group(self.proc.pid, signal.SIGKILL)
        self.conf.remove()
        logged = tail(self.run_dir / "service.log", max(1024, self.output_limit - 200))
        if self.owns_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if ended == "aborted":
            return Outcome(-1, logged, SERVICE_ABORTED_NOTE)
        return Outcome(exit_code(code), logged, signal_note(code))


class Executor:
    def __init__(self, config: ExecConfig, http: httpx.AsyncClient) -> None:
        self.config = config
        self.http = http
        config.work_dir.mkdir(parents=True, exist_ok=True)

    def _new_dir(self, kind: str, job: AgentJob) -> Path:
        safe = job.job_id if job.job_id.replace("-", "").replace("_", "").isalnum() else "job"
        return Path(tempfile.mkdtemp(prefix=f"{kind}-{safe}-", dir=self.config.work_dir))

    async def _unpack(self, url: str, into: Path) -> None:
        archive = into / "app.zip"
        await download(self.http, url, archive, self.config.deploy_max_bytes)
        await asyncio.to_thread(extract, archive, into, 10 * self.config.deploy_max_bytes)
        archive.unlink()

    def _confine(self, job: AgentJob, default: Limits) -> Confinement:
        """The job's limits applied: what it asked, else `default` (capacity.limits_for)."""
        try:
            return self.config.backend.confine(job.job_id, limits_for(Ask.of(job), default))
        except OSError as exc:
            raise DeployError(f"agent: cannot set resource limits: {exc}") from None

    async def run(
        self,
        job: AgentJob,
        workspace: Path | None,
        abort: asyncio.Event,
        tee: OutputTee | None = None,
    ) -> Outcome:
        """Run a run-job to completion (deploy path if it has a deploy_url); its process's
        output is also fed to `tee` as it comes."""
        job_dir = self._new_dir("job", job)
        try:
            argv, cwd = ["sh", "-c", job.command], workspace or job_dir
            if job.deploy_url:
                await self._unpack(job.deploy_url, job_dir)
                if not (job_dir / "start.sh").is_file():
                    return Outcome(-1, "", NO_START_SCRIPT)
                argv, cwd = ["sh", str(job_dir / "start.sh")], job_dir
            conf = self._confine(job, self.config.run_limits)
            try:
                return await capture(
                    argv,
                    env=job_env(job),
                    cwd=cwd,
                    conf=conf,
                    output_limit=self.config.output_limit,
                    timeout=self.config.timeout_secs,
                    abort=abort,
                    tee=tee,
                )
            finally:
                conf.remove()
        except DeployError as exc:
            return Outcome(-1, "", str(exc))
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)

    async def start_service(self, job: AgentJob, workspace: Path | None) -> Service | Outcome:
        """Start a service detached; an `Outcome` when it cannot start."""
        run_dir = workspace or self._new_dir("svc", job)
        try:
            if job.deploy_url:
                await self._unpack(job.deploy_url, run_dir)
            if job.command:
                argv = ["sh", "-c", job.command]
            elif (run_dir / "start.sh").is_file():
                argv = ["sh", str(run_dir / "start.sh")]
            else:
                raise DeployError("no start script")
            conf = self._confine(job, self.config.service_limits)
        except DeployError as exc:
            if workspace is None:
                shutil.rmtree(run_dir, ignore_errors=True)
            return Outcome(-1, "", str(exc))
        try:
            with (run_dir / "service.log").open("ab") as logfile:
                proc = await asyncio.create_subprocess_exec(
                    *wrapper_command(conf, argv),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=logfile,
                    stderr=asyncio.subprocess.STDOUT,
                    env=job_env(job),
                    cwd=run_dir,
                    start_new_session=True,
                )
        except OSError as exc:
            conf.remove()
            return Outcome(-1, "", f"spawn failed: {exc}")
        limit = self.config.output_limit
        return Service(job, proc, conf, run_dir, workspace is None, limit)

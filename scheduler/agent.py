"""The reference compute agent: `scheduler agent`.

It speaks the Rust ec2-agent's protocol (CONTRACT 3.2-3.4) to the registry and the scheduler:
register, heartbeat every 10 s, poll `GET /jobs?node_id=&status=pending` every 3 s, PATCH
`running`, run `sh -c`, PATCH `done`/`failed` with the exit code and the output. Where the
original is weak it does better (CONTRACT 8):
- a 404 heartbeat (the registry forgot the node) re-registers instead of being ignored;
- it runs up to --max-jobs jobs at once and polls again as soon as one ends;
- a 409 on the `running` PATCH means another agent claimed the job: it is skipped;
- output is bounded, limits are enforced (agent_limits.py), run jobs are killed once the
  scheduler has timed them out (JOB_TIMEOUT_SECS plus two sweeps), deploy archives are
  checked (agent_exec.py);
- it keeps polling when its instances are not running (the original stopped entirely), and a
  failed report is retried;
- SIGTERM/SIGINT: stop polling, let running jobs finish within AGENT_GRACE_SECS, kill and
  report the rest, stop the services it started, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import msgspec

from scheduler.agent_exec import AgentJob, Executor, Outcome, Service
from scheduler.models import ID_RE

log = logging.getLogger("scheduler.agent")

MiB = 1024 * 1024
_jobs_decoder = msgspec.json.Decoder(list[AgentJob])


class _Instance(msgspec.Struct):
    id: str = ""
    status: str = ""


_instances_decoder = msgspec.json.Decoder(list[_Instance])


class AgentError(Exception):
    """The agent cannot go on (for example the registry never accepted it)."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node_id: str
    scheduler_url: str
    registry_url: str
    api_key: str = ""
    poll_secs: float = 3.0
    heartbeat_secs: float = 10.0
    grace_secs: float = 30.0
    max_jobs: int = 1
    http_timeout_secs: float = 5.0
    register_attempts: int = 11
    register_retry_secs: float = 2.0
    report_attempts: int = 5
    report_backoff_secs: float = 1.0


class Agent:
    def __init__(self, config: AgentConfig, executor: Executor, http: httpx.AsyncClient) -> None:
        self.config = config
        self.executor = executor
        self.http = http
        self.stopping = asyncio.Event()
        self.wake = asyncio.Event()
        self.abort_runs = asyncio.Event()
        self.abort_services = asyncio.Event()
        self.runs: dict[str, asyncio.Task[None]] = {}
        self.services: dict[str, asyncio.Task[None]] = {}

    def stop(self) -> None:
        if not self.stopping.is_set():
            log.info("stopping: no new jobs; waiting for %d running", len(self.runs))
        self.stopping.set()

    def _url(self, base: str, path: str) -> str:
        return base.rstrip("/") + path

    # Registry.

    async def register(self) -> bool:
        body = {
            "id": self.config.node_id,
            "hostname": socket.gethostname(),
            "cpu_count": os.cpu_count() or 1,
            "role": "compute",
        }
        url = self._url(self.config.registry_url, "/nodes/register")
        try:
            response = await self.http.post(url, json=body)
        except httpx.HTTPError as exc:
            log.warning("register at %s failed: %s", url, exc)
            return False
        if not response.is_success:
            log.warning("register at %s: HTTP %d %s", url, response.status_code, response.text)
            return False
        log.info("registered node %s at %s", self.config.node_id, self.config.registry_url)
        return True

    async def register_with_retries(self) -> None:
        for attempt in range(self.config.register_attempts):
            if await self.register():
                return
            if attempt + 1 < self.config.register_attempts and await self._sleep(
                self.config.register_retry_secs
            ):
                raise AgentError("stopped before registering")
        raise AgentError(f"could not register at {self.config.registry_url}")

    async def heartbeat(self) -> None:
        url = self._url(self.config.registry_url, "/nodes/heartbeat")
        try:
            response = await self.http.post(url, json={"id": self.config.node_id})
        except httpx.HTTPError as exc:
            log.warning("heartbeat failed: %s", exc)
            return
        if response.status_code == 404:
            log.warning(
                "the registry does not know node %s: registering again", self.config.node_id
            )
            await self.register()

    async def _heartbeat_loop(self) -> None:
        while not await self._sleep(self.config.heartbeat_secs):
            try:
                await self.heartbeat()
            except Exception:  # a bug in one beat must not silence the node for good
                log.exception("heartbeat")

    async def workspaces(self) -> dict[str, Path]:
        """Work dirs of this node's running instances (the rest get a fresh dir per job)."""
        url = self._url(self.config.registry_url, "/instances")
        try:
            response = await self.http.get(url, params={"node_id": self.config.node_id})
            instances = _instances_decoder.decode(response.content) if response.is_success else []
        except (httpx.HTTPError, msgspec.DecodeError):
            return {}
        spaces = {}
        for inst in instances:
            if inst.status == "running" and ID_RE.fullmatch(inst.id) and inst.id not in (".", ".."):
                path = self.executor.config.work_dir / "instances" / inst.id
                path.mkdir(parents=True, exist_ok=True)
                spaces[inst.id] = path
        return spaces

    # Scheduler.

    async def pending(self) -> list[AgentJob]:
        url = self._url(self.config.scheduler_url, "/jobs")
        params = {"node_id": self.config.node_id, "status": "pending"}
        try:
            response = await self.http.get(url, params=params)
        except httpx.HTTPError as exc:
            log.warning("poll failed: %s", exc)
            return []
        if not response.is_success:
            log.warning("poll: HTTP %d %s", response.status_code, response.text.strip())
            return []
        try:
            return _jobs_decoder.decode(response.content)
        except msgspec.DecodeError as exc:
            log.warning("poll: unreadable job list: %s", exc)
            return []

    def _job_url(self, job_id: str) -> str:
        return self._url(self.config.scheduler_url, "/jobs/" + quote(job_id, safe=""))

    async def claim(self, job: AgentJob) -> bool:
        body = {"status": "running", "exit_code": None, "stdout": "", "stderr": ""}
        try:
            response = await self.http.patch(self._job_url(job.job_id), json=body)
        except httpx.HTTPError as exc:
            log.warning("claim %s failed: %s", job.job_id, exc)
            return False
        if response.status_code == 409:
            log.info("%s was claimed by another agent: skipped", job.job_id)
            return False
        if not response.is_success:
            log.warning("claim %s: HTTP %d %s", job.job_id, response.status_code, response.text)
            return False
        return True

    async def report(self, job_id: str, outcome: Outcome) -> None:
        """PATCH the result; network errors and 5xx are retried with backoff."""
        body = {
            "status": outcome.status,
            "exit_code": outcome.exit_code,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
        }
        for attempt in range(self.config.report_attempts):
            try:
                response = await self.http.patch(self._job_url(job_id), json=body)
                if response.status_code < 500:
                    if not response.is_success:
                        log.warning(
                            "report %s: HTTP %d %s",
                            job_id,
                            response.status_code,
                            response.text.strip(),
                        )
                    return
                problem = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                problem = str(exc) or type(exc).__name__
            log.warning("report %s failed (%s), attempt %d", job_id, problem, attempt + 1)
            if attempt + 1 < self.config.report_attempts:
                await asyncio.sleep(min(self.config.report_backoff_secs * 2**attempt, 10))
        log.error("gave up reporting %s: %s", job_id, outcome.status)

    # Jobs.

    async def _run(self, job: AgentJob, workspace: Path | None) -> None:
        try:
            outcome = await self.executor.run(job, workspace, self.abort_runs)
        except Exception as exc:  # a bug here must not leave the job running for ever
            log.exception("running %s", job.job_id)
            outcome = Outcome(-1, "", f"agent error: {exc}")
        log.info("%s finished: %s (exit %d)", job.job_id, outcome.status, outcome.exit_code)
        try:
            await self.report(job.job_id, outcome)
        finally:
            self.runs.pop(job.job_id, None)
            self.wake.set()

    async def _serve(self, service: Service) -> None:
        try:
            outcome = await service.wait(self.abort_services)
            log.info("service %s exited: %s", service.job.job_id, outcome.exit_code)
            await self.report(service.job.job_id, outcome)
        finally:
            self.services.pop(service.job.job_id, None)

    async def _start(self, job: AgentJob, workspace: Path | None) -> None:
        if job.job_type != "service":
            self.runs[job.job_id] = asyncio.create_task(self._run(job, workspace))
            return
        started = await self.executor.start_service(job, workspace)
        if isinstance(started, Outcome):
            await self.report(job.job_id, started)
            return
        log.info("service %s started (pid %d)", job.job_id, started.proc.pid)
        self.services[job.job_id] = asyncio.create_task(self._serve(started))

    async def poll_once(self) -> None:
        if len(self.runs) >= self.config.max_jobs:
            return
        spaces = await self.workspaces()
        for job in await self.pending():
            if self.stopping.is_set():
                return
            if job.job_type != "service" and len(self.runs) >= self.config.max_jobs:
                continue
            if await self.claim(job):
                log.info("claimed %s: %s", job.job_id, job.command or job.deploy_url)
                await self._start(job, spaces.get(job.instance_id))

    async def _poll_loop(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            try:
                await self.poll_once()
            except Exception:  # a bug in one tick must not stop the agent polling for good
                log.exception("poll")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._either(self.wake), self.config.poll_secs)

    async def _either(self, event: asyncio.Event) -> None:
        """Until `event` or stopping."""
        waiters = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.stopping.wait())}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep, or less when stopping; True if stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()

    async def shutdown(self) -> None:
        self.abort_services.set()
        runs = list(self.runs.values())
        if runs:
            _, late = await asyncio.wait(runs, timeout=self.config.grace_secs)
            if late:
                log.warning("killing %d jobs still running after the grace period", len(late))
                self.abort_runs.set()
                await asyncio.wait(late)
        if self.services:
            await asyncio.wait(list(self.services.values()))

    async def run(self) -> None:
        await self.register_with_retries()
        loops = [
            asyncio.create_task(self._heartbeat_loop()),
            asyncio.create_task(self._poll_loop()),
        ]
        await self.stopping.wait()
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self.shutdown()
        log.info("agent %s stopped", self.config.node_id)

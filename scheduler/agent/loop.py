"""The reference compute agent's loop: `scheduler agent`.

It speaks the Rust ec2-agent's protocol (CONTRACT 3.2-3.4) to the registry and the scheduler:
register, heartbeat every 10 s, poll `GET /jobs?node_id=&status=pending` every 3 s (with
`wait=AGENT_POLL_WAIT_SECS`: a long-poll the scheduler answers once there is work), PATCH
`running`, run `sh -c`, PATCH `done`/`failed` with the exit code and the output. Where the
original is weak it does better (CONTRACT 8):
- a 404 heartbeat (the registry forgot the node) re-registers instead of being ignored;
- it runs up to --max-jobs jobs at once and polls again as soon as one ends;
- a 409 on the `running` PATCH means another agent claimed the job: it is skipped;
- a job runs with the cpus and memory it asked as its limits, one asking more than the node
  offers is refused with a report, one that does not fit beside the running jobs waits
  (capacity.py);
- a run job's stdout and stderr reach the scheduler while it runs, in chunks (ours only:
  live_output.py; AGENT_LIVE_OUTPUT=off sends them in the report only, as the original);
- output is bounded, limits are enforced (limits.py), run jobs are killed once the
  scheduler has timed them out (JOB_TIMEOUT_SECS plus two sweeps), deploy archives are
  checked (executor.py);
- it keeps polling when its instances are not running (the original stopped entirely), and a
  failed report is retried;
- SIGTERM/SIGINT: drain its own node (docs/GUIDE.md, Drain: no new job is bound to it, its queue
  moves to the other nodes; a call of at most 2 s that an older scheduler may refuse), stop
  polling, let running jobs finish within AGENT_GRACE_SECS, kill and report the rest, stop
  the services it started, deregister the node (its pending jobs move to live nodes at
  once), exit 0. Its next registration lifts the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path

import httpx

from scheduler.agent.capacity import Ask, fits_now, refusal
from scheduler.agent.config import AgentConfig
from scheduler.agent.executor import (
    ABORTED_NOTE,
    CANCELLED_NOTE,
    SERVICE_ABORTED_NOTE,
    AgentJob,
    Executor,
    Outcome,
    Service,
)
from scheduler.agent.live_output import LiveOutput
from scheduler.agent.remote import AgentError, Remote
from scheduler.models.wire import ID_RE

log = logging.getLogger("scheduler.agent")
STILL_WAITING_SECS = 10.0  # a stopping agent's line while its running jobs finish


class Agent:
    def __init__(self, config: AgentConfig, executor: Executor, http: httpx.AsyncClient) -> None:
        self.config = config
        self.executor = executor
        self.remote = Remote(config, http)
        self.stopping = asyncio.Event()
        self.wake = asyncio.Event()
        # One stop event per running job or service: set when the scheduler cancels it, or
        # when the agent stops (services at once, runs after the grace).
        self.stops: dict[str, asyncio.Event] = {}
        self.cancelled: set[str] = set()
        self.remote.on_cancel = self.cancel
        self.runs: dict[str, asyncio.Task[None]] = {}
        self.services: dict[str, asyncio.Task[None]] = {}
        # What each running job and service asked (capacity.py): given back as soon as it
        # ends, before its report, so the agent never counts a job the scheduler has let go.
        self.held: dict[str, Ask] = {}
        # Jobs polled that do not fit beside the running ones, logged once while they wait.
        self.waiting: set[str] = set()
        self.said_cap = ""  # the scheduler's MAX_JOBS_PER_NODE last said (_say_cap)
        # Held from a claim's request until its job is started: a stop cancels the poll loop
        # only outside it, so a job the scheduler marked running is never left unrun.
        self.claiming = asyncio.Lock()
        self.said_stopping = False  # the stop's line, said once (_say_stopping)

    def stop(self) -> None:
        # A claim under way: the scheduler has its job running and the agent runs it, but it
        # is not among the runs yet ("no job running", then a silent wait for it): run() says
        # the line once the claim is settled.
        if not self.stopping.is_set() and not self.claiming.locked():
            self._say_stopping()
        self.stopping.set()

    def _say_stopping(self) -> None:
        """Once: what the stop waits for."""
        if self.said_stopping:
            return
        self.said_stopping = True
        if self.runs:
            log.info(
                "stopping: no new jobs; waiting up to %g s (AGENT_GRACE_SECS) for %s to "
                "finish, then killing and reporting what is left",
                self.config.grace_secs,
                ", ".join(sorted(self.runs)),
            )
        else:
            log.info("stopping: no job running")

    async def register_with_retries(self) -> None:
        for attempt in range(self.config.register_attempts):
            if await self.remote.register():
                return
            if attempt + 1 < self.config.register_attempts and await self._sleep(
                self.config.register_retry_secs
            ):
                raise AgentError("stopped before registering")
        raise AgentError(f"could not register at {self.config.registry_url}")

    async def _heartbeat_loop(self) -> None:
        while not await self._sleep(self.config.heartbeat_secs):
            try:
                await self.remote.heartbeat()
            except Exception:  # a bug in one beat must not silence the node for good
                log.exception("heartbeat")

    async def workspaces(self) -> dict[str, Path]:
        """Work dirs of this node's running instances (the rest get a fresh dir per job)."""
        spaces = {}
        for inst in await self.remote.instances():
            if inst.status == "running" and ID_RE.fullmatch(inst.id) and inst.id not in (".", ".."):
                path = self.executor.config.work_dir / "instances" / inst.id
                path.mkdir(parents=True, exist_ok=True)
                spaces[inst.id] = path
        return spaces

    # Jobs.

    def cancel(self, job_ids: list[str]) -> None:
        """The scheduler cancelled these jobs (its poll header, its heartbeat answer): stop
        the ones running here; each is then reported `cancelled`."""
        for job_id in job_ids:
            stop = self.stops.get(job_id)
            if stop is not None and job_id not in self.cancelled:
                log.info("%s was cancelled: stopping it", job_id)
                self.cancelled.add(job_id)
                stop.set()

    def _ended(self, job_id: str, outcome: Outcome) -> Outcome:
        self.stops.pop(job_id, None)
        self.held.pop(job_id, None)
        if job_id in self.cancelled:
            self.cancelled.discard(job_id)
            stopped = outcome.stderr.removesuffix(ABORTED_NOTE).removesuffix(SERVICE_ABORTED_NOTE)
            return dataclasses.replace(outcome, cancelled=True, stderr=stopped + CANCELLED_NOTE)
        return outcome

    async def _run(self, job: AgentJob, workspace: Path | None) -> None:
        stop = self.stops.setdefault(job.job_id, asyncio.Event())
        live = self._live_output(job.job_id)
        try:
            outcome = await self.executor.run(job, workspace, stop, live)
        except Exception as exc:  # a bug here must not leave the job running for ever
            log.exception("running %s", job.job_id)
            outcome = Outcome(-1, "", f"agent error: {exc}")
        outcome = self._ended(job.job_id, outcome)
        log.info("%s finished: %s (exit %d)", job.job_id, outcome.status, outcome.exit_code)
        try:
            if live is not None:
                await live.finish()  # the live output ends before the report (bounded)
            await self.remote.report(job.job_id, outcome)
        finally:
            self.runs.pop(job.job_id, None)
            self.wake.set()

    def _live_output(self, job_id: str) -> LiveOutput | None:
        """Where a run job's output goes as it comes (live_output.py): nowhere when switched
        off, or when this scheduler was found to refuse it."""
        if not self.config.live_output or self.remote.live_refused:
            return None
        return LiveOutput(self.remote, job_id)

    async def _serve(self, service: Service) -> None:
        job_id = service.job.job_id
        try:
            outcome = self._ended(job_id, await service.wait(self.stops[job_id]))
            log.info("service %s exited: %s (%s)", job_id, outcome.exit_code, outcome.status)
            await self.remote.report(job_id, outcome)
        finally:
            self.services.pop(job_id, None)

    async def _start(self, job: AgentJob, workspace: Path | None) -> None:
        if job.job_type != "service":
            self.runs[job.job_id] = asyncio.create_task(self._run(job, workspace))
            return
        started = await self.executor.start_service(job, workspace)
        if isinstance(started, Outcome):
            await self.remote.report(job.job_id, self._ended(job.job_id, started))
            return
        log.info("service %s started (pid %d)", job.job_id, started.proc.pid)
        self.stops[job.job_id] = asyncio.Event()
        self.services[job.job_id] = asyncio.create_task(self._serve(started))

    async def poll_once(self) -> bool:
        """One poll; True when the next one should follow at once: with long-poll on, it
        started a job or the scheduler held it (no work came for a while). A scheduler that
        answers at once (the original) is polled every poll_secs as before."""
        # At capacity the poll claims nothing, but with long-poll on it is still sent: the
        # scheduler holds it until a job of this node is cancelled (X-Cancel-Jobs, within
        # milliseconds, instead of the next heartbeat's answer) or there is room again.
        if len(self.runs) >= self.config.max_jobs and not self.config.poll_wait_secs:
            return False
        spaces = await self.workspaces()
        began = asyncio.get_running_loop().time()
        jobs = await self.remote.pending(capacity=self.config.max_jobs)
        self._say_cap()
        wait = self.config.poll_wait_secs
        held = wait > 0 and asyncio.get_running_loop().time() - began >= wait / 2
        started = False
        for job in jobs:
            async with self.claiming:
                if self.stopping.is_set():
                    return False
                started = await self._take(job, spaces.get(job.instance_id)) or started
        self.waiting &= {job.job_id for job in jobs}
        return held or (wait > 0 and started)

    async def _take(self, job: AgentJob, workspace: Path | None) -> bool:
        """Claim one polled job and start it (or refuse it); True if it started."""
        if job.job_type != "service" and len(self.runs) >= self.config.max_jobs:
            return False
        ask = Ask.of(job)
        refused = refusal(ask, self.config.offer, self.config.node_id)
        if not refused and not self._fits_now(job.job_id, ask):
            return False
        if not await self.remote.claim(job):
            return False
        if refused:
            await self._refuse(job.job_id, refused)
            return False
        log.info("claimed %s: %s", job.job_id, job.command or job.deploy_url)
        self.held[job.job_id] = ask
        await self._start(job, workspace)
        return True

    def _say_cap(self) -> None:
        """Once per value: the scheduler hands this node at most MAX_JOBS_PER_NODE jobs at
        once, so a --max-jobs above it runs no more (`--max-jobs 4` said "up to 4 jobs" and
        ran one)."""
        cap, said = self.remote.cap, self.said_cap
        self.said_cap = cap
        if cap == said or not cap.isdigit() or int(cap) >= self.config.max_jobs:
            return
        log.warning(
            "the scheduler runs at most %s job(s) at once on a node (its MAX_JOBS_PER_NODE): "
            "this agent runs %s, not --max-jobs %d; set MAX_JOBS_PER_NODE=%d where the API "
            "runs for more",
            cap,
            cap,
            self.config.max_jobs,
            self.config.max_jobs,
        )

    def _fits_now(self, job_id: str, ask: Ask) -> bool:
        """Whether the job fits beside the running ones; if not it stays pending here, as on
        a full node, and is polled again once a job ends."""
        if fits_now(ask, self.config.offer, self.held.values()):
            self.waiting.discard(job_id)
            return True
        if job_id not in self.waiting:
            self.waiting.add(job_id)
            log.info("%s waits for room: it asks %s, the running jobs hold the rest", job_id, ask)
        return False

    async def _refuse(self, job_id: str, reason: str) -> None:
        """A job that can never run here, claimed only to say so: reported failed (exit -1)
        with the reason as its stderr. (A report of failed needs the job running; the
        scheduler's retry, if any, comes back and is refused the same way.)"""
        log.warning("refused %s: %s", job_id, reason.strip().replace("\n", "; "))
        await self.remote.report(job_id, Outcome(-1, "", reason))

    async def _poll_loop(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            try:
                if await self.poll_once():
                    continue
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
        for job_id in self.services:
            self.stops[job_id].set()
        runs = list(self.runs.values())
        if runs:
            late = await self._wait_runs(runs)
            if late:
                log.warning("killing %d jobs still running after the grace period", len(late))
                for job_id in self.runs:
                    self.stops[job_id].set()
                await asyncio.wait(late)
        if self.services:
            await asyncio.wait(list(self.services.values()))

    async def _wait_runs(self, runs: list[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        """The runs still going after the grace period; every STILL_WAITING_SECS meanwhile, a
        line saying which and for how long yet (a stop that waits says what for)."""
        left, late = self.config.grace_secs, set(runs)
        while late and left > 0:
            step = min(STILL_WAITING_SECS, left)
            _, late = await asyncio.wait(late, timeout=step)
            left -= step
            if late and left > 0:
                going = sorted(job_id for job_id, task in self.runs.items() if task in late)
                log.info("still waiting for %s to finish: killed in %.0f s", ", ".join(going), left)
        return late

    async def run(self) -> None:
        await self.register_with_retries()
        loops = [
            asyncio.create_task(self._heartbeat_loop()),
            asyncio.create_task(self._poll_loop()),
        ]
        await self.stopping.wait()
        # Beside the grace, not before it: the drain is bounded and never delays the stop.
        draining = asyncio.create_task(self.remote.drain_self())
        async with self.claiming:  # a claim under way ends with its job started
            self._say_stopping()
            for task in loops:
                task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self.shutdown()
        await draining
        # Only now: the node's jobs are reported, so none is left running on a node the
        # scheduler treats as gone.
        await self.remote.deregister()
        log.info("agent %s stopped", self.config.node_id)

"""The agent's calls to the registry and the scheduler over HTTP (CONTRACT 3.2-3.4).

Each call logs and answers what the loop needs; a network error is never raised to it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import msgspec

from scheduler.agent.executor import AgentJob, Outcome

log = logging.getLogger("scheduler.agent")

_jobs_decoder = msgspec.json.Decoder(list[AgentJob])


class Instance(msgspec.Struct):
    id: str = ""
    status: str = ""


_instances_decoder = msgspec.json.Decoder(list[Instance])


class AgentError(Exception):
    """The agent cannot go on (for example the registry never accepted it)."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node_id: str
    scheduler_url: str
    registry_url: str
    api_key: str = ""
    poll_secs: float = 3.0
    poll_wait_secs: float = 0.0  # long-poll: the scheduler answers once there is work
    heartbeat_secs: float = 10.0
    grace_secs: float = 30.0
    max_jobs: int = 1
    http_timeout_secs: float = 5.0
    register_attempts: int = 11
    register_retry_secs: float = 2.0
    report_attempts: int = 5
    report_backoff_secs: float = 1.0


class Remote:
    def __init__(self, config: AgentConfig, http: httpx.AsyncClient) -> None:
        self.config = config
        self.http = http

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

    async def instances(self) -> list[Instance]:
        """This node's instances; none when the registry cannot say."""
        url = self._url(self.config.registry_url, "/instances")
        try:
            response = await self.http.get(url, params={"node_id": self.config.node_id})
            return _instances_decoder.decode(response.content) if response.is_success else []
        except (httpx.HTTPError, msgspec.DecodeError):
            return []

    # Scheduler.

    async def pending(self) -> list[AgentJob]:
        url = self._url(self.config.scheduler_url, "/jobs")
        params = {"node_id": self.config.node_id, "status": "pending"}
        wait = self.config.poll_wait_secs
        if wait:
            params["wait"] = f"{wait:g}"
        read = self.http.timeout.read
        try:
            response = await self.http.get(
                url, params=params, timeout=None if read is None else read + wait
            )
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

"""The agent's calls to the registry and the scheduler over HTTP (CONTRACT 3.2-3.4).

Each call logs and answers what the loop needs; a network error is never raised to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx
import msgspec

from scheduler.agent import token_file
from scheduler.agent.config import AgentConfig
from scheduler.agent.executor import AgentJob, Outcome
from scheduler.models import poll

log = logging.getLogger("scheduler.agent")

_jobs_decoder = msgspec.json.Decoder(list[AgentJob])


class _Registered(msgspec.Struct):
    token: str = ""


_registered_decoder = msgspec.json.Decoder(_Registered)


class _Beat(msgspec.Struct):
    cancel: list[str] = []


_beat_decoder = msgspec.json.Decoder(_Beat)


class _Drained(msgspec.Struct):
    moved: int = 0
    unplaced: int = 0  # left the node for no node yet (an older scheduler: absent)
    stayed: int = 0  # bound to it still: an instance's, or past one call's limit


_drain_decoder = msgspec.json.Decoder(_Drained)
# What becomes of the jobs a stopping node's drain left bound to it (one call moves at most
# 1000): once the node is gone, the scheduler's sweep moves them as a lost node's, a delayed
# one when it is due (store/scripts/lua/delete_node.lua).
STAYED = (
    " (bound to this node still: an instance's stay, the others move once it is gone,"
    " a delayed one when due)"
)
# A clean stop's drain waits at most this long: a scheduler that does not answer must not
# delay the stop (AGENT_GRACE_SECS is for the running jobs).
DRAIN_SECS = 2.0


class Instance(msgspec.Struct):
    id: str = ""
    status: str = ""


_instances_decoder = msgspec.json.Decoder(list[Instance])
# A credential refused: 401, or past the scheduler's limit of wrong ones from this address
# 429 (api/guesses.py). A right one is always served, so either means the node token went
# stale (its node deleted, or Redis lost it): the agent registers again with its key or join
# key, which are right and pass.
REFUSED = (401, 429)


class AgentError(Exception):
    """The agent cannot go on (for example the registry never accepted it)."""


class Remote:
    """The node token (from POST /nodes/register) goes on every call once the agent has one;
    before that, and for the first registration, the API key when it is set."""

    def __init__(self, config: AgentConfig, http: httpx.AsyncClient) -> None:
        self.config = config
        self.http = http
        self.token = self._load_token()
        # Told the ids of this node's jobs the scheduler is cancelling, from the poll's
        # X-Cancel-Jobs header and the heartbeat's `cancel` field.
        self.on_cancel: Callable[[list[str]], None] = lambda job_ids: None
        # One registration at a time after a refused token: calls under way together (a
        # poll, a heartbeat, reports) are refused together once it goes stale.
        self._renewing = asyncio.Lock()
        self._hinted = False  # the refused registration's hint, logged once
        self.cap = ""  # the scheduler's MAX_JOBS_PER_NODE, as its last poll answer said
        self.live_refused = False  # the scheduler refuses live output (live_output.py)

    def _load_token(self) -> str:
        return token_file.load(Path(self.config.token_path)) if self.config.token_path else ""

    def _keep_token(self, token: str) -> None:
        self.token = token
        if not self.config.token_path:
            return
        try:
            token_file.save(Path(self.config.token_path), token)
        except OSError as exc:
            log.warning("could not keep the node token in %s: %s", self.config.token_path, exc)

    def _forget_token(self) -> None:
        if self.token:
            log.warning("the node token of %s was refused: registering again", self.config.node_id)
            self._keep_token("")

    async def _renewed(self, response: httpx.Response) -> bool:
        """After a call refused for the node token it carried (REFUSED): the token is dropped
        and the node registered again, unless the token was replaced while the call was under
        way (that refusal was the old token's; the new one is kept). True when the agent now
        holds another token: the call is to be made again with it. Without a token the agent
        called with nothing to renew (an external registry issues none)."""
        sent = self._refused_token(response)
        if not sent:
            return False
        async with self._renewing:
            if self.token == sent:
                self._forget_token()
                await self.register()
        return bool(self.token) and self.token != sent

    def _refused_token(self, response: httpx.Response) -> str:
        """The node token a refused call carried (REFUSED), else "" (answered, or refused
        the key, the join key or no bearer at all)."""
        if response.status_code not in REFUSED:
            return ""
        sent = response.request.headers.get("authorization", "").removeprefix("Bearer ")
        return "" if sent in ("", self.config.api_key, self.config.join_key) else sent

    def _auth(self, joining: bool = False) -> dict[str, str]:
        """The node token once there is one; before, to register, the join key if set."""
        secret = self.token or (joining and self.config.join_key) or self.config.api_key
        return {"Authorization": f"Bearer {secret}"} if secret else {}

    def _url(self, base: str, path: str) -> str:
        return base.rstrip("/") + path

    # Registry.

    async def register(self) -> bool:
        offer = self.config.offer
        body = {
            "id": self.config.node_id,
            "hostname": socket.gethostname(),
            "cpu_count": offer.cpus,
            "role": "compute",
            # Ours (issue 24); registries that do not know them ignore them, as Go does.
            "memory_mb": offer.memory_mb,
            "labels": dict(offer.labels),
        }
        url = self._url(self.config.registry_url, "/nodes/register")
        try:
            response = await self.http.post(url, json=body, headers=self._auth(joining=True))
        except httpx.HTTPError as exc:
            log.warning("register at %s failed: %s", url, exc)
            return False
        if response.status_code in REFUSED and self._refused_token(response) == self.token:
            self._forget_token()  # revoked, or lost with Redis: the next attempt goes without
        if not response.is_success:
            log.warning("register at %s: HTTP %d %s", url, response.status_code, response.text)
            if response.status_code in REFUSED and not self._refused_token(response):
                self._hint_refused()
            return False
        with contextlib.suppress(msgspec.DecodeError):
            token = _registered_decoder.decode(response.content).token
            if token and token != self.token:
                self._keep_token(token)
            elif not token and self.token:
                # Registered as anyone (open mode), its token not the node's: a wrong
                # credential wherever it is compared (the drain, the delete); dropped.
                log.warning("node %s did not take its token back: dropped", self.config.node_id)
                self._keep_token("")
        log.info("registered node %s at %s", self.config.node_id, self.config.registry_url)
        return True

    def _hint_refused(self) -> None:
        """Once: why the registration's key (or the lack of one) was refused, and the fix."""
        if self.config.refused_hint and not self._hinted:
            self._hinted = True
            log.error("%s", self.config.refused_hint)

    async def heartbeat(self) -> bool:
        """A beat; True when the registry took it (with the token it carried)."""
        url = self._url(self.config.registry_url, "/nodes/heartbeat")
        try:
            response = await self.http.post(
                url, json={"id": self.config.node_id}, headers=self._auth()
            )
        except httpx.HTTPError as exc:
            log.warning("heartbeat failed: %s", exc)
            return False
        if response.status_code in REFUSED:
            await self._renewed(response)
        elif response.status_code == 404:
            log.warning(
                "the registry does not know node %s: registering again", self.config.node_id
            )
            await self.register()
        elif response.is_success:
            with contextlib.suppress(msgspec.DecodeError):
                cancels = _beat_decoder.decode(response.content).cancel
                if cancels:
                    self.on_cancel(cancels)
        return response.is_success

    async def drain_self(self) -> None:
        """A clean stop's first step: the scheduler drains this node ("stopping"), so no new
        job is bound to it while its running jobs finish, and its queue moves to the other
        nodes now; its next registration lifts the drain. Never holds the stop: the call is
        bounded by DRAIN_SECS, and any failure is logged and passed over (an older scheduler
        without drains answers 404 or 405: nothing to say)."""
        path = "/nodes/" + quote(self.config.node_id, safe="") + "/drain"
        url = self._url(self.config.scheduler_url, path)
        try:
            response = await asyncio.wait_for(
                self.http.post(url, json={"by": "stopping"}, headers=self._auth()), DRAIN_SECS
            )
        except (httpx.HTTPError, TimeoutError) as exc:
            log.warning("drain at %s failed: %s", url, str(exc) or type(exc).__name__)
            return
        if response.status_code in (404, 405):
            log.info("the scheduler at %s has no drain for this node", self.config.scheduler_url)
        elif not response.is_success:
            log.warning("drain: HTTP %d %s", response.status_code, response.text.strip())
        else:
            with contextlib.suppress(msgspec.DecodeError):
                done = _drain_decoder.decode(response.content)
                log.info(
                    "drained node %s: %d queued job(s) moved, %d unplaced, %d stayed%s",
                    self.config.node_id,
                    done.moved,
                    done.unplaced,
                    done.stayed,
                    STAYED if done.stayed else "",
                )

    async def deregister(self) -> None:
        """A clean stop: the registry forgets the node, so no job is placed on it and its
        pending jobs move to live nodes now, instead of once the node is found silent."""
        url = self._url(self.config.registry_url, "/nodes/" + quote(self.config.node_id, safe=""))
        try:
            response = await self.http.delete(url, headers=self._auth())
        except httpx.HTTPError as exc:
            log.warning("deregister at %s failed: %s", url, exc)
            return
        if response.is_success or response.status_code == 404:
            log.info("deregistered node %s", self.config.node_id)
            self._keep_token("")  # gone with the node
        else:
            log.warning("deregister: HTTP %d %s", response.status_code, response.text.strip())

    async def instances(self) -> list[Instance]:
        """This node's instances; none when the registry cannot say."""
        url = self._url(self.config.registry_url, "/instances")
        try:
            params = {"node_id": self.config.node_id}
            response = await self.http.get(url, params=params, headers=self._auth())
            # A refusal is not taken for a stale token here: a scheduler from before issue 36
            # asked the key for this list. The poll that follows tells (and registers again).
            return _instances_decoder.decode(response.content) if response.is_success else []
        except (httpx.HTTPError, msgspec.DecodeError):
            return []

    # Scheduler.

    async def pending(self, capacity: int | None = None) -> list[AgentJob]:
        url = self._url(self.config.scheduler_url, "/jobs")
        # Ours: how many it runs at once, and that its claims name its node (so idle nodes
        # may take from its queue what it has no room for: docs/GUIDE.md, Work stealing).
        params = {"node_id": self.config.node_id, "status": "pending", poll.CLAIMS: poll.NAMED}
        if capacity is not None:
            params[poll.CAPACITY] = str(capacity)
        wait = self.config.poll_wait_secs
        if wait:
            params["wait"] = f"{wait:g}"
        read = self.http.timeout.read
        try:
            response = await self.http.get(
                url,
                params=params,
                headers=self._auth(),
                timeout=None if read is None else read + wait,
            )
        except httpx.HTTPError as exc:
            log.warning("poll failed: %s", exc)
            return []
        if not response.is_success:
            log.warning("poll: HTTP %d %s", response.status_code, response.text.strip())
            await self._renewed(response)  # the next poll carries the new token
            return []
        # Ours says its MAX_JOBS_PER_NODE (the original does not): loop.Agent._say_cap.
        self.cap = response.headers.get("x-max-jobs-per-node", self.cap)
        cancels = response.headers.get("x-cancel-jobs", "")
        if cancels:
            self.on_cancel(cancels.split(","))
        try:
            return _jobs_decoder.decode(response.content)
        except msgspec.DecodeError as exc:
            log.warning("poll: unreadable job list: %s", exc)
            return []

    def _job_url(self, job_id: str) -> str:
        return self._url(self.config.scheduler_url, "/jobs/" + quote(job_id, safe=""))

    async def claim(self, job: AgentJob) -> bool:
        """PATCH `running`. The body is the Rust agent's plus our node id, which makes a
        repeated claim answer 200: so a claim whose answer was lost (a network error, a 5xx)
        is retried with backoff instead of leaving the job running with no one running it."""
        body = {
            "status": "running",
            "exit_code": None,
            "stdout": "",
            "stderr": "",
            "node_id": self.config.node_id,
        }
        for attempt in range(self.config.report_attempts):
            try:
                response = await self.http.patch(
                    self._job_url(job.job_id), json=body, headers=self._auth()
                )
                if await self._renewed(response):
                    continue
                if response.status_code < 500:
                    return self._claimed(job, response)
                problem = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                problem = str(exc) or type(exc).__name__
            log.warning("claim %s failed (%s), attempt %d", job.job_id, problem, attempt + 1)
            if attempt + 1 < self.config.report_attempts:
                await asyncio.sleep(min(self.config.report_backoff_secs * 2**attempt, 10))
        log.error("gave up claiming %s", job.job_id)
        return False

    def _claimed(self, job: AgentJob, response: httpx.Response) -> bool:
        if response.status_code == 409:
            log.info("%s: %s: skipped", job.job_id, response.text.strip())
            return False
        if not response.is_success:
            log.warning("claim %s: HTTP %d %s", job.job_id, response.status_code, response.text)
            return False
        return True

    async def report(self, job_id: str, outcome: Outcome) -> None:
        """PATCH the result; network errors and 5xx are retried with backoff (a repeat of a
        report that was applied answers 200: it is identical to the stored one). A refused
        token (401: revoked, or replaced by the operator's re-register) is not the result's
        fault: the node registers again and the report is made with its new token (so too on a
        429: the token was wrong, past the scheduler's limit of wrong ones). Any other 4xx is
        final (404: no job of this node's by that id, 409: the job moved on)."""
        body = {
            "status": outcome.status,
            "exit_code": outcome.exit_code,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "node_id": self.config.node_id,
        }
        for attempt in range(self.config.report_attempts):
            try:
                response = await self.http.patch(
                    self._job_url(job_id), json=body, headers=self._auth()
                )
                if await self._renewed(response):
                    continue
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

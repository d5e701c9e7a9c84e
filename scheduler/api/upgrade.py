"""Each API process's periodic look at the layout before the hash tag, after the upgrade
(store/migrate.py, `old_layout_findings`): a process of the old version started again, or one
never stopped, writes keys the new version never reads, and the deployment would split in
two without a word. Every CHECK_SECS, from a thread on a connection of its own, this process
asks; what it finds is logged as an ERROR (again every REMIND_SECS while it lasts) and
counted by the gauge `scheduler_old_layout_findings` (behind the key; `/health`, anyone's,
names none of it: an old worker's host is not a stranger's business). The gauge reads the
last answer kept here: no request waits on this check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import redis
from redis.exceptions import RedisError

from scheduler.config import Settings
from scheduler.store.connection.blocking import sync_client
from scheduler.store.migrate import is_cluster, old_layout_findings

log = logging.getLogger("scheduler.api.upgrade")

CHECK_SECS = 10.0
REMIND_SECS = 60.0


class OldLayoutWatch:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.findings: list[str] = []
        self._client: redis.Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._logged_at = -REMIND_SECS

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                found = await asyncio.to_thread(self._check)
            except RedisError as exc:
                # The API's own calls report an outage; the last answer stands meanwhile.
                log.debug("old layout check skipped, Redis unavailable: %s", exc)
            else:
                if found is None:
                    return  # a cluster: the old layout cannot be there
                self._update(found)
            await asyncio.sleep(CHECK_SECS)

    def _check(self) -> list[str] | None:
        if self._client is None:
            self._client = sync_client(
                self.settings, socket_connect_timeout=CHECK_SECS, socket_timeout=CHECK_SECS
            )
        if is_cluster(self._client):
            return None
        return old_layout_findings(self._client, self.settings.redis_prefix)

    def _update(self, found: list[str]) -> None:
        now = time.monotonic()
        if found and (not self.findings or now - self._logged_at >= REMIND_SECS):
            self._logged_at = now
            log.error(
                "the layout before the hash tag is in use (prefix %r): %s. This deployment "
                "lives under {%s}:* and never reads the old keys; stop every process of the "
                "old version (docs/UPGRADING.md)",
                self.settings.redis_prefix,
                "; ".join(found),
                self.settings.redis_prefix,
            )
        elif not found and self.findings:
            log.info("the layout before the hash tag is no longer in use")
        self.findings = found

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            self._client.close()

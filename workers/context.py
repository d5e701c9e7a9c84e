"""What the task functions run with: settings and clients, one set per worker process.

rq calls a task with only its arguments, and those are stored in Redis (and shown in
rq-dashboard), so settings and secrets are not passed there. The worker sets the context at
start (`configure`); a task run anywhere else builds it from the environment on first use.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import httpx
import redis

from scheduler.config import Settings
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from workers.outage import until_redis_answers

RUNS_KEPT = 1000


@dataclass(frozen=True, slots=True)
class Context:
    settings: Settings
    store: SyncJobStore
    http: httpx.Client

    @property
    def keys(self) -> Keys:
        return self.store.keys

    @property
    def redis(self) -> redis.Redis:
        return self.store.redis

    def count(self, counts: Counter[str]) -> None:
        """Add to the deployment's background-work counters (the P:stats hash). Counting
        often follows work that cannot be undone (a publish SNS took): it waits out a Redis
        outage rather than fail the task, which rq would then run again."""
        if not counts:
            return
        pipe = self.redis.pipeline(transaction=False)
        for name, value in counts.items():
            pipe.hincrby(self.keys.stats, name, value)
        until_redis_answers("counting", pipe.execute)

    def record_run(self, task: str, period: int, now: float) -> None:
        """Log a periodic task's run (newest last, the last RUNS_KEPT kept)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(self.keys.runs(task), f"{period} {now:.3f}")
        pipe.ltrim(self.keys.runs(task), -RUNS_KEPT, -1)
        pipe.execute()

    def close(self) -> None:
        self.http.close()
        self.store.close()


_current: Context | None = None


def configure(settings: Settings) -> Context:
    """Make `settings` the context of this process's tasks (closing the previous one)."""
    global _current
    close()
    _current = Context(
        settings=settings,
        store=SyncJobStore.connect(settings),
        http=httpx.Client(timeout=settings.http_timeout_secs),
    )
    return _current


def current() -> Context:
    if _current is not None:
        return _current
    settings = Settings.from_env()
    return configure(settings.served())  # as the worker serves (worker.py)


def close() -> None:
    global _current
    if _current is not None:
        _current.close()
        _current = None

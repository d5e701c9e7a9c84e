"""rq's state of a deployment whose workers are other processes, read by key name.

This test process imported rq once, with the rq prefix of the environment's REDIS_PREFIX
(workers/rq_prefix.py); each test's deployment has a prefix of its own, and its worker
processes keep rq's keys under "{prefix}:rq". rq's classes here would look elsewhere (and find
nothing, which would make "drained" true at once), so these read the deployment's keys.
"""

from __future__ import annotations

from typing import Any

import redis

from scheduler.config import Settings
from scheduler.store.keys import Keys


def _queue(settings: Settings, kind: str) -> str:
    return Keys(settings.redis_prefix).rq_queue(kind)


def queued(r: redis.Redis, settings: Settings, kind: str) -> int:
    keys = Keys(settings.redis_prefix)
    return int(r.llen(keys.rq_key("queue", _queue(settings, kind))))


def popped(r: redis.Redis, settings: Settings, kind: str) -> int:
    """Jobs a worker took off the queue, not yet started (rq's intermediate list)."""
    keys = Keys(settings.redis_prefix)
    return int(r.llen(keys.rq_key("queue", _queue(settings, kind)) + ":intermediate"))


def registered(r: redis.Redis, settings: Settings, kind: str, registry: str) -> int:
    """How many jobs are in one of the queue's registries: wip (started), scheduled, failed."""
    keys = Keys(settings.redis_prefix)
    return int(r.zcard(keys.rq_key(registry, _queue(settings, kind))))


def job_field(r: redis.Redis, settings: Settings, job_id: str, field: str) -> str | None:
    raw: Any = r.hget(Keys(settings.redis_prefix).rq_key("job", job_id), field)
    return None if raw is None else raw.decode()


def worker_fields(r: redis.Redis, settings: Settings, kind: str, field: str) -> list[str]:
    """`field` of each live rq worker of the queue (rq's workers:<queue> set of worker keys)."""
    keys = Keys(settings.redis_prefix)
    members: Any = r.smembers(keys.rq_key("workers", _queue(settings, kind)))
    return [(r.hget(member, field) or b"").decode() for member in sorted(members)]

"""A job's record as the API answers it, read from Redis the way the store reads it: its
parts (models/record.py), one MGET."""

from __future__ import annotations

import json
from typing import Any

import redis

from scheduler.models.record import record
from scheduler.store.keys import Keys
from scheduler.store.records import job_parts


def stored_record(r: redis.Redis, keys: Keys, job_id: str) -> bytes | None:
    return record(r.mget(job_parts(keys, job_id)))  # type: ignore[arg-type]


def stored_job(r: redis.Redis, keys: Keys, job_id: str) -> Any:
    """The job's record decoded; the job must exist."""
    raw = stored_record(r, keys, job_id)
    assert raw is not None, f"{job_id} is not stored"
    return json.loads(raw)

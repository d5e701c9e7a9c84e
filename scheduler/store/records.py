"""The keys of a job's record in parts (models/record.py), in the order `assemble` reads
them: its head, its spec, its outputs."""

from __future__ import annotations

from scheduler.models.record import OUTPUT_FIELDS
from scheduler.store.keys import Keys


def job_parts(keys: Keys, job_id: str) -> list[str]:
    streams = [keys.job_output(job_id, stream) for stream in OUTPUT_FIELDS]
    return [keys.job(job_id), keys.job_spec(job_id), *streams]

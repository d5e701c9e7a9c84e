"""A new job's arguments to the create script, for whichever checkout is on the path: the
benchmarks that compare this version with an earlier one (--against) run their measuring
child with the earlier checkout first on its path, and this module beside the script."""

from __future__ import annotations

from typing import Any


def creation(job: Any) -> tuple[bytes, dict[str, Any]]:
    """(`record`, the other keyword arguments of create_job) of the new job `job`: its head
    and spec since records are in parts (models/record.py), its whole record before."""
    try:
        from scheduler.models.record import creation_parts
    except ImportError:
        from scheduler.models.job import creation_json  # type: ignore[attr-defined]

        return creation_json(job), {}
    parts = creation_parts(job)
    return parts.head, {"spec": parts.spec}

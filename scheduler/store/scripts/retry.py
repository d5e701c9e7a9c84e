"""The deployment's retry rule, as the scripts that retry a job take it (ARGV `max_retries
backoff backoff_cap seed`; library.py `retries_left`, `retry_wait`). A job may carry its own
max_retries and retry_backoff_secs, which the scripts read first."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from scheduler.config import Settings

ARGV = "max_retries backoff backoff_cap seed"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int  # MAX_JOB_RETRIES
    backoff_secs: int  # RETRY_BACKOFF_SECS: 0, a retry at once (the original's)
    backoff_cap_secs: int  # RETRY_BACKOFF_CAP_SECS

    @classmethod
    def of(cls, settings: Settings) -> RetryPolicy:
        return cls(
            settings.max_job_retries, settings.retry_backoff_secs, settings.retry_backoff_cap_secs
        )

    def args(self, seed: float | None = None) -> dict[str, Any]:
        """The call's arguments; `seed` spreads the jitter of the jobs it retries (random
        unless a test fixes it)."""
        return {
            "max_retries": self.max_retries,
            "backoff": self.backoff_secs,
            "backoff_cap": self.backoff_cap_secs,
            "seed": random.random() if seed is None else seed,
        }

"""Why the scheduler ended a job, in words (models/job.py ENDINGS' failure reasons): for
people, no route or command names. The job page (api/ui_job.py reason) and the CLI's warning
of a job ended as it was submitted (cli/output.py ended_warning) say it alike."""

from __future__ import annotations

from scheduler.models.job import FAILURE_REASONS

FAILURE_WORDS = {
    "cancelled": "cancelled on request",
    "timed_out": "ran past its timeout (JOB_TIMEOUT_SECS) and was stopped",
    "node_lost": "its node stopped sending heartbeats while it ran",
    "dependency_failed": "a job it runs after failed, so it never ran",
}
if set(FAILURE_WORDS) != set(FAILURE_REASONS):
    raise TypeError("models/endings.py FAILURE_WORDS needs words for each FAILURE_REASONS")

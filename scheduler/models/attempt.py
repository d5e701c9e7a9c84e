"""One attempt of a job, as GET /jobs/{id}/attempts answers it: kept apart from the job's
record (the record is what the original's agent, CLI and lambda read, and stays as it was).

An attempt ends where the job's life ends or retries it (store/scripts/lua/includes/: `finish`,
the last attempt, its reason the ending's name; `requeue`, a retried one, its reason what
ended it: failed, timed_out or node_lost). Redis keeps the last ATTEMPTS_KEPT of a job, each
with the last ATTEMPT_TAIL_BYTES of its stdout and stderr (cut on a UTF-8 boundary), and
drops them with the job (retention); the SQLite snapshot does not hold them.
"""

from __future__ import annotations

import msgspec

ATTEMPTS_KEPT = 50
ATTEMPT_TAIL_BYTES = 2048


class Attempt(msgspec.Struct, omit_defaults=True, kw_only=True):
    """`attempt`: the job's attempt number when it ended (models/job.py attempt_of, counted
    over retries by hand too; a service placed again after its node was lost uses no retry,
    so its number repeats). `started_at` is absent for an
    attempt that never ran (cancelled while pending or delayed). `reason`: an ending of
    models.job.ENDINGS (done, failed, cancelled, timed_out, node_lost)."""

    attempt: int
    node_id: str
    reason: str
    ended_at: str
    started_at: str = ""
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""


attempts_decoder = msgspec.json.Decoder(list[Attempt])

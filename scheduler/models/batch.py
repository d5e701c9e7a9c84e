"""POST /jobs/batch on the wire (docs/GUIDE.md, Submitting many jobs): the answer's entries,
one per job in the batch's order. The server (api/batch.py) and the client
(scheduler/client) read them from here."""

from __future__ import annotations

import msgspec

MAX_JOBS = 1000  # as BullMQ's addBulk or Slurm's MaxArraySize would say it: one request's


class Made(msgspec.Struct):
    job_id: str


class Refused(msgspec.Struct, omit_defaults=True):
    error: str  # POST /jobs' plain-text error for this job
    status: int  # the status POST /jobs would have answered
    field: str = ""  # the job's field the error names, when it names one

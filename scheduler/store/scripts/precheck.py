"""A report's check before its body is read: CHECK_REPORT and its call."""

from __future__ import annotations

from scheduler.store.errors import JobNotFound
from scheduler.store.scripts.codes import check_found
from scheduler.store.scripts.script import Call, Script

CHECK_REPORT = Script(
    "CHECK_REPORT",
    "job_id caller",
    """
-- Before the body of an agent's report is read (PATCH /jobs/{id} with a large or unsized
-- body, or in token mode): this caller may report on the job, which exists; neither reads
-- the record (library.py job_access). TRANSITION checks again.
-- Returns OK | NOT_FOUND | UNAUTHORIZED
if caller == "open" or caller == "key" then
  return redis.call("EXISTS", K.job(job_id)) == 1 and OK or NOT_FOUND
end
return (job_access(caller, job_id))
""",
    lambda code: check_found(code, JobNotFound),
    read_only=True,
)


def check_report(job_id: str, caller: str) -> Call[None]:
    return CHECK_REPORT.call(job_id=job_id, caller=caller)

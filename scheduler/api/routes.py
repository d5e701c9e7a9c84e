"""The route table: every path and method the API serves, its endpoint, who may call it
(docs/SECURITY.md), when it is served and whether the hot lane serves it. Starlette's routes,
the key rule (http.BearerAuth), the metrics labels and the hot lane (lane.Lane) all read this
one table (routing.py says how); so do the tests (tests/api/test_routes.py). Each method names
the query parameters its endpoint reads (`reads`): the only ones it can read, one value each.

The order is Starlette's: the first entry matching path and method serves it
(`/nodes/register` before `/nodes/{node_id}`). The web UI's entries (routes_ui.py), the
nodes' and services' (routes_nodes.py) and the teams' (routes_teams.py) are declared apart,
to keep each module small, and stand in the table where their comment says.

Each method also says what it does, takes and answers (`summary`, `body`, `answers`: the
models it decodes and encodes, described.py), from which GET /openapi.json describes the
API (openapi.py); its errors, plain text (a UI page under /ui), are described for all.
"""

from __future__ import annotations

from typing import Any

from scheduler.api import (
    batch,
    events,
    jobs,
    logs,
    metrics,
    openapi,
    retries,
    routes_nodes,
    routes_teams,
    routes_ui,
    schedules,
)
from scheduler.api.described import DONE, Answer, body, got, json, stream, text
from scheduler.api.routing import PAGING, Access, Entry, Hot, Method, RouteTable
from scheduler.models import poll
from scheduler.models.access_key import Role
from scheduler.models.attempt import Attempt
from scheduler.models.event import Event
from scheduler.models.job import Job, JobCreate, JobUpdate
from scheduler.models.log import Accepted, OffsetConflict, OutputChunk
from scheduler.models.queue_place import QueuePlace
from scheduler.models.retry import RetryAnswer, RetryRequest
from scheduler.models.schedule import ScheduleRequest, ScheduleView

READER, SUBMITTER, OPERATOR, ADMIN = Role.READER, Role.SUBMITTER, Role.OPERATOR, Role.ADMIN

ANYONE, AGENT, KEY = Access.ANYONE, Access.AGENT, Access.KEY
LISTING = ("node_id", "status", "wait", *poll.OURS, *PAGING)  # the poll's, a listing's

# Answers several methods give (described.py); errors are described for every method.
JOB = {200: json(Job, "the job"), 404: text("job not found")}
SCHEDULE = {200: json(ScheduleView, "the schedule"), 404: text("schedule not found")}
LOG = text(
    "the attempt's output, without `follow`",
    {"X-Attempt": "the attempt shown", "X-Log-Dropped": "bytes trimmed from the log's start"},
)
POLLED = {
    "X-Cancel-Jobs": "the poll's: the ids of the node's jobs being cancelled, comma-separated",
    "X-Max-Jobs-Per-Node": "the poll's: how many jobs a node runs at once",
}


TABLE = RouteTable(
    [
        Entry(
            "/health",
            {
                "GET": Method(
                    jobs.health,
                    ANYONE,
                    role=READER,
                    summary="Whether the API is up",
                    answers=got(jobs.Health),
                )
            },
        ),
        Entry(
            "/schedule",
            {
                "GET": Method(
                    jobs.schedule,
                    role=READER,
                    summary="The node a new job would be placed on now",
                    answers=got(jobs.Picked),
                )
            },
        ),
        Entry(
            "/jobs",
            {
                # The poll's node_id and status, a listing's filters and page, a long-poll's wait.
                "GET": Method(
                    jobs.list_jobs,
                    Access.POLL,
                    Hot.POLL,
                    LISTING,
                    role=READER,
                    summary="An agent's poll (node_id, status=pending: the jobs it claims), or a "
                    "listing of jobs, a page at a time",
                    answers={200: Answer("the jobs", list[Job], headers=POLLED)},
                ),
                "POST": Method(
                    jobs.submit_job,
                    KEY,
                    Hot.SUBMIT,
                    role=SUBMITTER,
                    summary="Submit a job (an Idempotency-Key header makes a retry safe)",
                    body=body(JobCreate),
                    answers={
                        201: json(Job, "the job made"),
                        200: json(Job, "the job this Idempotency-Key made before"),
                        422: text("the Idempotency-Key was used for another request"),
                    },
                ),
            },
        ),
        # Bulk submit (docs/GUIDE.md, Submitting many jobs): as POST /jobs, behind the key;
        # not on the hot lane (its bodies are larger than the lane takes: lane.MAX_BODY).
        Entry(
            "/jobs/batch",
            {
                "POST": Method(
                    batch.submit_jobs,
                    KEY,
                    role=SUBMITTER,
                    summary="Submit up to 1000 jobs: each made or refused alone, in order",
                    body=body(batch.DescribedBody),
                    answers=got(batch.DescribedAnswer, "each job's id, or its own error"),
                )
            },
        ),
        # Retry by hand (docs/GUIDE.md, Delays and retries): the operator's, behind the key.
        Entry(
            "/jobs/retry",
            {
                "POST": Method(
                    retries.retry_jobs,
                    role=SUBMITTER,
                    summary="Retry failed jobs",
                    body=body(RetryRequest),
                    answers=got(RetryAnswer, "which were retried, and why the others not"),
                )
            },
        ),
        Entry(
            "/jobs/{job_id}/retry",
            {
                "POST": Method(
                    retries.retry_job,
                    role=SUBMITTER,
                    summary="Retry a failed job",
                    answers={**JOB, 409: text("the job is not failed, or waits on a failed one")},
                )
            },
        ),
        Entry(
            "/jobs/{job_id}",
            {
                "GET": Method(
                    jobs.get_job,
                    KEY,
                    Hot.READ,
                    ("wait", "status_not"),
                    role=READER,
                    summary="A job (with `wait`, once its status is not `status_not`)",
                    answers=JOB,
                ),
                # The agent's report.
                "PATCH": Method(
                    jobs.update_job,
                    AGENT,
                    Hot.REPORT,
                    role=ADMIN,
                    summary="An agent's report: the job running, or how it ended",
                    body=body(JobUpdate),
                    answers={**JOB, 409: text("the report conflicts with the job's state")},
                ),
                "DELETE": Method(
                    jobs.cancel_job,
                    role=SUBMITTER,
                    summary="Cancel a job (a running one is cancelling until its agent stops it)",
                    answers={**JOB, 409: text("the job has ended")},
                ),
            },
        ),
        # Each attempt of a job (models/attempt.py), apart from its record: as GET /jobs/{id}.
        Entry(
            "/jobs/{job_id}/attempts",
            {
                "GET": Method(
                    jobs.get_attempts,
                    KEY,
                    role=READER,
                    summary="A job's ended attempts, oldest first",
                    answers=got(list[Attempt]),
                )
            },
        ),
        # A pending job's place in its queue (models/queue_place.py): as GET /jobs/{id}, whose
        # answer stays the record alone (the agents' path).
        Entry(
            "/jobs/{job_id}/place",
            {
                "GET": Method(
                    jobs.get_place,
                    KEY,
                    role=READER,
                    summary="A pending job's place in the queue it waits in ({} in none)",
                    answers=got(QueuePlace),
                )
            },
        ),
        # Live output (docs/GUIDE.md, Watching jobs): our agent's chunks while the job runs,
        # and the output read or followed; the events of every job.
        Entry(
            "/jobs/{job_id}/output",
            {
                "POST": Method(
                    logs.post_output,
                    AGENT,
                    role=ADMIN,
                    summary="A chunk of a running job's output, from its agent",
                    body=body(OutputChunk),
                    answers={
                        200: json(Accepted, "the stream's next offset"),
                        409: json(OffsetConflict, "send again from `offset`"),
                    },
                )
            },
        ),
        Entry(
            "/jobs/{job_id}/logs",
            {
                "GET": Method(
                    logs.get_logs,
                    KEY,
                    reads=logs.READS,
                    role=READER,
                    summary="A job's output as text, or followed (`follow=1`) as events",
                    answers={200: (LOG, logs.FOLLOWED)},
                )
            },
        ),
        Entry(
            "/events",
            {
                "GET": Method(
                    events.events,
                    KEY,
                    reads=events.READS,
                    role=READER,
                    summary="Every job's status changes, as events",
                    answers={
                        200: stream(
                            "`job` events (the id is the position to resume after), and "
                            "`dropped` ones for events trimmed before they were read",
                            job=Event,
                        )
                    },
                )
            },
        ),
        # Schedules (docs/GUIDE.md, Schedules): the operator's, behind the key.
        Entry(
            "/schedules",
            {
                "GET": Method(
                    schedules.list_schedules,
                    reads=("after", "limit"),
                    role=READER,
                    summary="The schedules, a page by name",
                    answers=got(list[ScheduleView]),
                ),
                "POST": Method(
                    schedules.create,
                    role=OPERATOR,
                    summary="Make a schedule",
                    body=body(ScheduleRequest),
                    answers={
                        201: json(ScheduleView, "the schedule made"),
                        409: text("the name is taken"),
                    },
                ),
            },
        ),
        Entry(
            "/schedules/{name}",
            {
                "GET": Method(
                    schedules.get_schedule, role=READER, summary="A schedule", answers=SCHEDULE
                ),
                "DELETE": Method(
                    schedules.delete_schedule,
                    role=OPERATOR,
                    summary="Delete a schedule (the jobs it made stay)",
                    answers={**DONE, 404: SCHEDULE[404]},
                ),
            },
        ),
        Entry(
            "/schedules/{name}/pause",
            {
                "POST": Method(
                    schedules.pause, role=OPERATOR, summary="Pause a schedule", answers=SCHEDULE
                )
            },
        ),
        Entry(
            "/schedules/{name}/resume",
            {
                "POST": Method(
                    schedules.resume, role=OPERATOR, summary="Resume a schedule", answers=SCHEDULE
                )
            },
        ),
        # The web UI: every page behind the login cookie but the login form.
        *routes_ui.ENTRIES,
        # The built-in registry's (what the Rust agent calls), the nodes', the drains'.
        *routes_nodes.ENTRIES,
        # Teams: named keys, the audit, namespaces' quotas.
        *routes_teams.ENTRIES,
        Entry(
            "/metrics",
            {
                "GET": Method(
                    metrics.metrics,
                    role=READER,
                    summary="Prometheus metrics",
                    answers={200: Answer("the metrics", str, metrics.CONTENT_TYPE)},
                )
            },
            "metrics",
        ),
        # This API's description, generated from this table (openapi.py): the key's, as the
        # rest of the API (anyone's when no key is set).
        Entry(
            "/openapi.json",
            {
                "GET": Method(
                    openapi.openapi_json,
                    role=READER,
                    summary="This API's OpenAPI 3.1 description",
                    answers=got(dict[str, Any], "the description"),
                )
            },
        ),
    ]
)

"""The route table: every path and method the API serves, its endpoint, who may call it
(docs/SECURITY.md), when it is served and whether the hot lane serves it. Starlette's routes,
the key rule (http.BearerAuth), the metrics labels and the hot lane (lane.Lane) all read this
one table (routing.py says how); so do the tests (tests/api/test_routes.py). Each method names
the query parameters its endpoint reads (`reads`): the only ones it can read, one value each.

The order is Starlette's: the first entry matching path and method serves it
(`/nodes/register` before `/nodes/{node_id}`).

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
    nodes,
    openapi,
    retries,
    schedules,
    services,
    ui,
    ui_dashboard,
    ui_dead,
    ui_job,
    ui_jobs,
    ui_nodes,
    ui_schedules,
)
from scheduler.api.described import Answer, body, empty, form, json, page, redirect, stream, text
from scheduler.api.routing import PAGING, Access, Entry, Hot, Method, RouteTable
from scheduler.api.ui_forms import Button
from scheduler.models.attempt import Attempt
from scheduler.models.event import Event
from scheduler.models.job import Job, JobCreate, JobUpdate
from scheduler.models.log import (
    Accepted,
    Dropped,
    Ended,
    OffsetConflict,
    Output,
    OutputChunk,
    Status,
)
from scheduler.models.registry import (
    DrainRequest,
    Heartbeat,
    Instance,
    Node,
    NodeBeat,
    NodeDrained,
    NodeRegistered,
    NodeRegistration,
    NodeUndrained,
    Service,
    ServiceCreate,
    ServiceUpdate,
)
from scheduler.models.schedule import ScheduleRequest, ScheduleView

ANYONE, AGENT, KEY, UI = Access.ANYONE, Access.AGENT, Access.KEY, Access.UI
LISTING = ("node_id", "status", "wait", "capacity", "claims", *PAGING)  # the poll's, a listing's
NOTICES = tuple(name for name, _ in ui_dead.NOTICES)  # retried=N&skipped=N...
REFRESH = ("refresh",)  # refresh=off: a UI page's refresh paused (ui_layout.py)

ANYONE, AGENT, KEY, UI = Access.ANYONE, Access.AGENT, Access.KEY, Access.UI
LISTING = ("node_id", "status", "wait", "capacity", "claims", *PAGING)  # the poll's, a listing's
NOTICES = tuple(name for name, _ in ui_dead.NOTICES)  # retried=N&skipped=N...
REFRESH = ("refresh",)  # refresh=off: a UI page's refresh paused (ui_layout.py)

# Answers several methods give (described.py); errors are described for every method.
JOB = {200: json(Job, "the job"), 404: text("job not found")}
DONE = {204: empty("done")}
SCHEDULE = {200: json(ScheduleView, "the schedule"), 404: text("schedule not found")}
PAGE = {200: page("the page")}
BACK = {303: redirect("done: back to the page (its refresh paused if it was)")}
BUTTON = form(Button)
FOLLOWED = stream(
    "the output as events (`output`'s id is the position to resume after); `end`, the last, "
    "once the job has ended",
    status=Status,
    output=Output,
    dropped=Dropped,
    end=Ended,
)
LOG = text(
    "the attempt's output, without `follow`",
    {"X-Attempt": "the attempt shown", "X-Log-Dropped": "bytes trimmed from the log's start"},
)
POLLED = {
    "X-Cancel-Jobs": "the poll's: the ids of the node's jobs being cancelled, comma-separated",
    "X-Max-Jobs-Per-Node": "the poll's: how many jobs a node runs at once",
}
NODE_GONE = {404: text("node not found")}
SERVICE_GONE = {404: text("service not found")}


def got(model: Any, description: str = "", status: int = 200) -> dict[int, Answer]:
    """One JSON answer: `model` at `status`."""
    return {status: json(model, description)}


TABLE = RouteTable(
    [
        Entry(
            "/health",
            {
                "GET": Method(
                    jobs.health, ANYONE, summary="Whether the API is up", answers=got(jobs.Health)
                )
            },
        ),
        Entry(
            "/schedule",
            {
                "GET": Method(
                    jobs.schedule,
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
                    summary="An agent's poll (node_id, status=pending: the jobs it claims), or a "
                    "listing of jobs, a page at a time",
                    answers={200: Answer("the jobs", list[Job], headers=POLLED)},
                ),
                "POST": Method(
                    jobs.submit_job,
                    KEY,
                    Hot.SUBMIT,
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
                    summary="Retry failed jobs",
                    body=body(retries.RetryRequest),
                    answers=got(retries.RetryAnswer, "which were retried, and why the others not"),
                )
            },
        ),
        Entry(
            "/jobs/{job_id}/retry",
            {
                "POST": Method(
                    retries.retry_job,
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
                    summary="A job (with `wait`, once its status is not `status_not`)",
                    answers=JOB,
                ),
                # The agent's report.
                "PATCH": Method(
                    jobs.update_job,
                    AGENT,
                    Hot.REPORT,
                    summary="An agent's report: the job running, or how it ended",
                    body=body(JobUpdate),
                    answers={**JOB, 409: text("the report conflicts with the job's state")},
                ),
                "DELETE": Method(
                    jobs.cancel_job,
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
                    summary="A job's ended attempts, oldest first",
                    answers=got(list[Attempt]),
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
                    summary="A job's output as text, or followed (`follow=1`) as events",
                    answers={200: (LOG, FOLLOWED)},
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
                    summary="The schedules, a page by name",
                    answers=got(list[ScheduleView]),
                ),
                "POST": Method(
                    schedules.create,
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
                "GET": Method(schedules.get_schedule, summary="A schedule", answers=SCHEDULE),
                "DELETE": Method(
                    schedules.delete_schedule,
                    summary="Delete a schedule (the jobs it made stay)",
                    answers={**DONE, 404: SCHEDULE[404]},
                ),
            },
        ),
        Entry(
            "/schedules/{name}/pause",
            {"POST": Method(schedules.pause, summary="Pause a schedule", answers=SCHEDULE)},
        ),
        Entry(
            "/schedules/{name}/resume",
            {"POST": Method(schedules.resume, summary="Resume a schedule", answers=SCHEDULE)},
        ),
        # The web UI: every page behind the login cookie but the login form.
        # The dashboard, the UI's home: its window (hour or day).
        Entry(
            "/ui",
            {
                "GET": Method(
                    ui_dashboard.dashboard,
                    UI,
                    reads=(*ui_dashboard.READS, *REFRESH),
                    summary="The web UI's dashboard",
                    answers=PAGE,
                )
            },
            other_methods=UI,
        ),
        Entry(
            "/ui/login",
            {
                "GET": Method(ui.login_page, ANYONE, summary="The login form", answers=PAGE),
                "POST": Method(
                    ui.login,
                    ANYONE,
                    summary="Log in with the key: a session's cookie",
                    body=form(ui.LoginForm),
                    answers={
                        303: redirect("logged in: to the dashboard, with the session's cookie"),
                        401: page("the form again: wrong key"),
                    },
                ),
            },
            other_methods=ANYONE,
        ),
        Entry(
            "/ui/logout",
            {
                "POST": Method(
                    ui.logout,
                    UI,
                    summary="End the session",
                    answers={303: redirect("to the login form")},
                )
            },
            other_methods=UI,
        ),
        # Its filters, page and search, and what the bulk retry's redirect says it did.
        Entry(
            "/ui/jobs",
            {
                "GET": Method(
                    ui_jobs.jobs_page,
                    UI,
                    reads=(*ui_jobs.READS, *NOTICES),
                    summary="The jobs list",
                    answers=PAGE,
                )
            },
            other_methods=UI,
        ),
        # The failed list's bulk retry (before /ui/jobs/{job_id}, as /jobs/retry).
        Entry(
            "/ui/jobs/retry",
            {
                "POST": Method(
                    ui_dead.retry_failed,
                    UI,
                    reads=REFRESH,
                    summary="Retry the failed jobs a page lists",
                    body=form(ui_dead.RetryForm),
                    answers={303: redirect("back to the failed list, saying what was done")},
                )
            },
            other_methods=UI,
        ),
        Entry(
            "/ui/jobs/{job_id}",
            {
                "GET": Method(
                    ui_job.job_page, UI, reads=REFRESH, summary="A job's page", answers=PAGE
                )
            },
            other_methods=UI,
        ),
        # The job page's live output (ui_live.py): GET /jobs/{id}/logs?follow=1's stream, the
        # same function, behind the login cookie instead of the key.
        Entry(
            "/ui/jobs/{job_id}/logs",
            {
                "GET": Method(
                    logs.follow_logs,
                    UI,
                    reads=logs.FOLLOW_READS,
                    summary="A job's output followed, for its page",
                    answers={200: FOLLOWED},
                )
            },
            other_methods=UI,
        ),
        # The buttons: back to their page, its refresh paused if it was.
        Entry(
            "/ui/jobs/{job_id}/cancel",
            {
                "POST": Method(
                    ui.cancel,
                    UI,
                    reads=REFRESH,
                    summary="A job page's Cancel button",
                    body=BUTTON,
                    answers=BACK,
                )
            },
            other_methods=UI,
        ),
        Entry(
            "/ui/jobs/{job_id}/retry",
            {
                "POST": Method(
                    ui.retry,
                    UI,
                    reads=REFRESH,
                    summary="A job page's Retry button",
                    body=BUTTON,
                    answers=BACK,
                )
            },
            other_methods=UI,
        ),
        Entry(
            "/ui/nodes",
            {
                "GET": Method(
                    ui_nodes.nodes_page, UI, reads=REFRESH, summary="The nodes", answers=PAGE
                )
            },
            other_methods=UI,
        ),
        # The nodes page's Drain and Undrain buttons.
        Entry(
            "/ui/nodes/{node_id}/{action}",
            {
                "POST": Method(
                    ui.drain_or_undrain,
                    UI,
                    reads=REFRESH,
                    summary="The nodes page's Drain and Undrain buttons (action: drain, undrain)",
                    body=BUTTON,
                    answers=BACK,
                )
            },
            other_methods=UI,
        ),
        Entry(
            "/ui/schedules",
            {
                "GET": Method(
                    ui_schedules.page,
                    UI,
                    reads=("after", *REFRESH),
                    summary="The schedules",
                    answers=PAGE,
                )
            },
            other_methods=UI,
        ),
        Entry(
            "/ui/schedules/{name}/{action}",
            {
                "POST": Method(
                    ui_schedules.pause_or_resume,
                    UI,
                    reads=REFRESH,
                    summary="The schedules page's Pause and Resume buttons (action: pause, resume)",
                    body=BUTTON,
                    answers=BACK,
                )
            },
            other_methods=UI,
        ),
        # The built-in registry (REGISTRY_URL unset): what the Rust agent calls.
        Entry(
            "/nodes/register",
            {
                "POST": Method(
                    nodes.register,
                    AGENT,
                    summary="Register a node (again)",
                    body=body(NodeRegistration),
                    answers=got(NodeRegistered, "the node", 201),
                )
            },
            "registry",
        ),
        Entry(
            "/nodes/heartbeat",
            {
                "POST": Method(
                    nodes.heartbeat,
                    AGENT,
                    summary="A node is alive",
                    body=body(Heartbeat),
                    answers={**got(NodeBeat, "the node"), **NODE_GONE},
                )
            },
            "registry",
        ),
        # Either registry's nodes: with REGISTRY_URL, read from it (nodes/registry.py).
        Entry(
            "/nodes",
            {
                "GET": Method(
                    nodes.list_nodes,
                    reads=("role",),
                    summary="The nodes, by id",
                    answers=got(dict[str, Node]),
                )
            },
        ),
        # The key, or in token mode a node's own token (nodes.delete_node decides).
        Entry(
            "/nodes/{node_id}",
            {
                "DELETE": Method(
                    nodes.delete_node,
                    AGENT,
                    summary="Remove a node (its pending jobs move to live nodes)",
                    answers={**DONE, **NODE_GONE},
                )
            },
            "registry",
        ),
        # Drains (docs/GUIDE.md, Drain), with either registry: the key, or in token mode a node's
        # own token for its own node as it stops (nodes.drain and nodes.undrain decide).
        Entry(
            "/nodes/{node_id}/drain",
            {
                "POST": Method(
                    nodes.drain,
                    AGENT,
                    summary="Drain a node: no new job goes to it, its jobs not running move",
                    body=body(DrainRequest, required=False),
                    answers={**got(NodeDrained), **NODE_GONE},
                )
            },
        ),
        Entry(
            "/nodes/{node_id}/undrain",
            {
                "POST": Method(
                    nodes.undrain,
                    AGENT,
                    summary="Lift a node's drain",
                    answers={**got(NodeUndrained), **NODE_GONE},
                )
            },
        ),
        # The agents' instances (always none here): their call, read before each poll.
        Entry(
            "/instances",
            {
                "GET": Method(
                    nodes.list_instances,
                    AGENT,
                    reads=("node_id",),
                    summary="The instances (always none with the built-in registry)",
                    answers=got(list[Instance]),
                )
            },
            "registry",
        ),
        Entry(
            "/services",
            {
                "GET": Method(
                    services.list_services,
                    Access.OWN_SERVICES,
                    reads=("node_id", "status"),
                    summary="The services (an agent's own: node_id)",
                    answers=got(list[Service]),
                ),
                "POST": Method(
                    services.create,
                    AGENT,
                    summary="Register a service an agent started",
                    body=body(ServiceCreate),
                    answers=got(Service, "the service", 201),
                ),
            },
            "registry",
        ),
        Entry(
            "/services/{service_id}",
            {
                "GET": Method(
                    services.get_service,
                    summary="A service",
                    answers={**got(Service), **SERVICE_GONE},
                ),
                "PATCH": Method(
                    services.update,
                    AGENT,
                    summary="A service's new status, from its agent",
                    body=body(ServiceUpdate),
                    answers={**DONE, **SERVICE_GONE},
                ),
                # The operator's stop.
                "DELETE": Method(
                    services.stop,
                    summary="Stop a service (its agent kills it at its next look)",
                    answers={**DONE, **SERVICE_GONE},
                ),
            },
            "registry",
        ),
        Entry(
            "/metrics",
            {
                "GET": Method(
                    metrics.metrics,
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
                    summary="This API's OpenAPI 3.1 description",
                    answers=got(dict[str, Any], "the description"),
                )
            },
        ),
    ]
)

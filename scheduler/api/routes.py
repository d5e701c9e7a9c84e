"""The route table: every path and method the API serves, its endpoint, who may call it
(docs/SECURITY.md), when it is served and whether the hot lane serves it. Starlette's routes,
the key rule (http.BearerAuth), the metrics labels and the hot lane (lane.Lane) all read this
one table (routing.py says how); so do the tests (tests/api/test_routes.py). Each method names
the query parameters its endpoint reads (`reads`): the only ones it can read, one value each.

The order is Starlette's: the first entry matching path and method serves it
(`/nodes/register` before `/nodes/{node_id}`).
"""

from __future__ import annotations

from scheduler.api import (
    batch,
    events,
    jobs,
    logs,
    metrics,
    nodes,
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
from scheduler.api.routing import PAGING, Access, Entry, Hot, Method, RouteTable

ANYONE, AGENT, KEY, UI = Access.ANYONE, Access.AGENT, Access.KEY, Access.UI
LISTING = ("node_id", "status", "wait", "capacity", "claims", *PAGING)  # the poll's, a listing's
NOTICES = tuple(name for name, _ in ui_dead.NOTICES)  # retried=N&skipped=N...
REFRESH = ("refresh",)  # refresh=off: a UI page's refresh paused (ui_layout.py)

TABLE = RouteTable(
    [
        Entry("/health", {"GET": Method(jobs.health, ANYONE)}),
        Entry("/schedule", {"GET": Method(jobs.schedule)}),
        Entry(
            "/jobs",
            {
                # The poll's node_id and status, a listing's filters and page, a long-poll's wait.
                "GET": Method(jobs.list_jobs, Access.POLL, Hot.POLL, LISTING),
                "POST": Method(jobs.submit_job, KEY, Hot.SUBMIT),
            },
        ),
        # Bulk submit (docs/GUIDE.md, Submitting many jobs): as POST /jobs, behind the key;
        # not on the hot lane (its bodies are larger than the lane takes: lane.MAX_BODY).
        Entry("/jobs/batch", {"POST": Method(batch.submit_jobs, KEY)}),
        # Retry by hand (docs/GUIDE.md, Delays and retries): the operator's, behind the key.
        Entry("/jobs/retry", {"POST": Method(retries.retry_jobs)}),
        Entry("/jobs/{job_id}/retry", {"POST": Method(retries.retry_job)}),
        Entry(
            "/jobs/{job_id}",
            {
                "GET": Method(jobs.get_job, KEY, Hot.READ, ("wait", "status_not")),
                "PATCH": Method(jobs.update_job, AGENT, Hot.REPORT),  # the agent's report
                "DELETE": Method(jobs.cancel_job),
            },
        ),
        # Each attempt of a job (models/attempt.py), apart from its record: as GET /jobs/{id}.
        Entry("/jobs/{job_id}/attempts", {"GET": Method(jobs.get_attempts, KEY)}),
        # Live output (docs/GUIDE.md, Watching jobs): our agent's chunks while the job runs,
        # and the output read or followed; the events of every job.
        Entry("/jobs/{job_id}/output", {"POST": Method(logs.post_output, AGENT)}),
        Entry("/jobs/{job_id}/logs", {"GET": Method(logs.get_logs, KEY, reads=logs.READS)}),
        Entry("/events", {"GET": Method(events.events, KEY, reads=events.READS)}),
        # Schedules (docs/GUIDE.md, Schedules): the operator's, behind the key.
        Entry(
            "/schedules",
            {
                "GET": Method(schedules.list_schedules, reads=("after", "limit")),
                "POST": Method(schedules.create),
            },
        ),
        Entry(
            "/schedules/{name}",
            {"GET": Method(schedules.get_schedule), "DELETE": Method(schedules.delete_schedule)},
        ),
        Entry("/schedules/{name}/pause", {"POST": Method(schedules.pause)}),
        Entry("/schedules/{name}/resume", {"POST": Method(schedules.resume)}),
        # The web UI: every page behind the login cookie but the login form.
        # The dashboard, the UI's home: its window (hour or day).
        Entry(
            "/ui",
            {"GET": Method(ui_dashboard.dashboard, UI, reads=(*ui_dashboard.READS, *REFRESH))},
            other_methods=UI,
        ),
        Entry(
            "/ui/login",
            {"GET": Method(ui.login_page, ANYONE), "POST": Method(ui.login, ANYONE)},
            other_methods=ANYONE,
        ),
        Entry("/ui/logout", {"POST": Method(ui.logout, UI)}, other_methods=UI),
        # Its filters, page and search, and what the bulk retry's redirect says it did.
        Entry(
            "/ui/jobs",
            {"GET": Method(ui_jobs.jobs_page, UI, reads=(*ui_jobs.READS, *NOTICES))},
            other_methods=UI,
        ),
        # The failed list's bulk retry (before /ui/jobs/{job_id}, as /jobs/retry).
        Entry(
            "/ui/jobs/retry",
            {"POST": Method(ui_dead.retry_failed, UI, reads=REFRESH)},
            other_methods=UI,
        ),
        Entry(
            "/ui/jobs/{job_id}",
            {"GET": Method(ui_job.job_page, UI, reads=REFRESH)},
            other_methods=UI,
        ),
        # The job page's live output (ui_live.py): GET /jobs/{id}/logs?follow=1's stream, the
        # same function, behind the login cookie instead of the key.
        Entry(
            "/ui/jobs/{job_id}/logs",
            {"GET": Method(logs.follow_logs, UI, reads=logs.FOLLOW_READS)},
            other_methods=UI,
        ),
        # The buttons: back to their page, its refresh paused if it was.
        Entry(
            "/ui/jobs/{job_id}/cancel",
            {"POST": Method(ui.cancel, UI, reads=REFRESH)},
            other_methods=UI,
        ),
        Entry(
            "/ui/jobs/{job_id}/retry",
            {"POST": Method(ui.retry, UI, reads=REFRESH)},
            other_methods=UI,
        ),
        Entry(
            "/ui/nodes", {"GET": Method(ui_nodes.nodes_page, UI, reads=REFRESH)}, other_methods=UI
        ),
        # The nodes page's Drain and Undrain buttons.
        Entry(
            "/ui/nodes/{node_id}/{action}",
            {"POST": Method(ui.drain_or_undrain, UI, reads=REFRESH)},
            other_methods=UI,
        ),
        Entry(
            "/ui/schedules",
            {"GET": Method(ui_schedules.page, UI, reads=("after", *REFRESH))},
            other_methods=UI,
        ),
        Entry(
            "/ui/schedules/{name}/{action}",
            {"POST": Method(ui_schedules.pause_or_resume, UI, reads=REFRESH)},
            other_methods=UI,
        ),
        # The built-in registry (REGISTRY_URL unset): what the Rust agent calls.
        Entry("/nodes/register", {"POST": Method(nodes.register, AGENT)}, "registry"),
        Entry("/nodes/heartbeat", {"POST": Method(nodes.heartbeat, AGENT)}, "registry"),
        # Either registry's nodes: with REGISTRY_URL, read from it (nodes/registry.py).
        Entry("/nodes", {"GET": Method(nodes.list_nodes, reads=("role",))}),
        # The key, or in token mode a node's own token (nodes.delete_node decides).
        Entry("/nodes/{node_id}", {"DELETE": Method(nodes.delete_node, AGENT)}, "registry"),
        # Drains (docs/GUIDE.md, Drain), with either registry: the key, or in token mode a node's
        # own token for its own node as it stops (nodes.drain and nodes.undrain decide).
        Entry("/nodes/{node_id}/drain", {"POST": Method(nodes.drain, AGENT)}),
        Entry("/nodes/{node_id}/undrain", {"POST": Method(nodes.undrain, AGENT)}),
        # The agents' instances (always none here): their call, read before each poll.
        Entry(
            "/instances",
            {"GET": Method(nodes.list_instances, AGENT, reads=("node_id",))},
            "registry",
        ),
        Entry(
            "/services",
            {
                "GET": Method(
                    services.list_services, Access.OWN_SERVICES, reads=("node_id", "status")
                ),
                "POST": Method(services.create, AGENT),
            },
            "registry",
        ),
        Entry(
            "/services/{service_id}",
            {
                "GET": Method(services.get_service),
                "PATCH": Method(services.update, AGENT),
                "DELETE": Method(services.stop),  # the operator's stop
            },
            "registry",
        ),
        Entry("/metrics", {"GET": Method(metrics.metrics)}, "metrics"),
    ]
)

"""The web UI's entries of the route table (routes.TABLE, where they stand in its order; its
docstring says what an entry says): every page behind the login cookie but the login form,
and each other method of their paths too (`other_methods`)."""

from __future__ import annotations

from scheduler.api import logs, ui, ui_dashboard, ui_dead, ui_job, ui_jobs, ui_nodes, ui_schedules
from scheduler.api.described import form, page, redirect, text
from scheduler.api.routing import Access, Entry, Method
from scheduler.api.ui_forms import Button
from scheduler.models.access_key import Role

READER, SUBMITTER, OPERATOR, ADMIN = Role.READER, Role.SUBMITTER, Role.OPERATOR, Role.ADMIN

ANYONE, UI = Access.ANYONE, Access.UI
NOTICES = tuple(name for name, _ in ui_dead.NOTICES)  # retried=N&skipped=N...
REFRESH = ("refresh",)  # refresh=off: a UI page's refresh paused (ui_layout.py)
PAGE = {200: page("the page")}
BACK = {303: redirect("done: back to the page (its refresh paused if it was)")}
BUTTON = form(Button)

ENTRIES = [
    # The root, where a browser first goes: to the dashboard (the login form until logged in).
    Entry(
        "/",
        {
            "GET": Method(
                ui.home,
                ANYONE,
                role=READER,
                summary="Where a browser lands: to the web UI",
                answers={303: redirect("to /ui"), 404: text("not a browser: no route here")},
            )
        },
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
                role=READER,
                summary="The web UI's dashboard",
                answers=PAGE,
            )
        },
        other_methods=UI,
    ),
    Entry(
        "/ui/login",
        {
            "GET": Method(
                ui.login_page, ANYONE, role=READER, summary="The login form", answers=PAGE
            ),
            "POST": Method(
                ui.login,
                ANYONE,
                role=READER,
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
                role=READER,
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
                role=READER,
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
                role=SUBMITTER,
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
                ui_job.job_page,
                UI,
                reads=REFRESH,
                role=READER,
                summary="A job's page",
                answers=PAGE,
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
                role=READER,
                summary="A job's output followed, for its page",
                answers={200: logs.FOLLOWED},
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
                role=SUBMITTER,
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
                role=SUBMITTER,
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
                ui_nodes.nodes_page,
                UI,
                reads=REFRESH,
                role=READER,
                summary="The nodes",
                answers=PAGE,
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
                role=OPERATOR,
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
                role=READER,
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
                role=OPERATOR,
                summary="The schedules page's Pause and Resume buttons (action: pause, resume)",
                body=BUTTON,
                answers=BACK,
            )
        },
        other_methods=UI,
    ),
]

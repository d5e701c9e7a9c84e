"""What each parameter a route reads means, for the OpenAPI description (openapi.py): the
query parameters by name (`QUERY`: every name any route's `Method.reads` names; one name means
one thing wherever it is read, its description saying the route's own reading where they
differ) and the path parameters by name (`PATH`). tests/api/test_openapi.py checks that every
name the route table reads has one here."""

from __future__ import annotations

from typing import Any

from scheduler.api import jobs, ui_dashboard, ui_dead
from scheduler.api.hot import MAX_CAPACITY
from scheduler.api.logs import MAX_ATTEMPT
from scheduler.models import poll
from scheduler.models.job import STATUSES
from scheduler.models.log import LOG_STREAMS
from scheduler.models.namespace import DEFAULT, NAME_RULE
from scheduler.models.registry import NODE_ROLES
from scheduler.models.wire import ID_RE
from scheduler.store.connection.notify import MAX_WAIT_SECS

Schema = dict[str, Any]
# (its JSON Schema, what it means)
Param = tuple[Schema, str]

TEXT: Schema = {"type": "string"}
AN_ID: Schema = {"type": "string", "pattern": f"^{ID_RE.pattern}$"}
A_COUNT: Schema = {"type": "integer", "minimum": 0}
A_JOB_ID: Schema = {"type": "string", "pattern": "^job-[0-9]+$"}

QUERY: dict[str, Param] = {
    "node_id": (
        AN_ID,
        "A node's id: with status=pending and no paging parameter, the agent's poll for that "
        "node (the jobs it claims now); otherwise a filter",
    ),
    "status": (
        TEXT,
        f"A filter by status: a job's ({', '.join(STATUSES)}), or on /services a service's",
    ),
    "wait": (
        {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECS},
        "A long-poll: wait up to this many seconds for something to answer",
    ),
    poll.CAPACITY: (
        {"type": "integer", "minimum": 0, "maximum": MAX_CAPACITY},
        "The poll's: how many jobs the agent runs at once",
    ),
    poll.CLAIMS: ({"enum": [poll.NAMED]}, f"The poll's: `{poll.NAMED}`, its claims name its node"),
    "limit": (
        {"type": "integer", "minimum": 1, "maximum": jobs.MAX_PAGE},
        f"A page's size (default {jobs.DEFAULT_PAGE})",
    ),
    "order": ({"enum": ["oldest", "newest"]}, "A listing's order (default oldest first)"),
    "after": (
        TEXT,
        "Where a page or a stream resumes: a job id (job listings), a schedule's name "
        "(schedules), an event's id (streams; Last-Event-ID says it too; 0 on /events: from "
        "the oldest kept)",
    ),
    "before": (A_JOB_ID, "A page of the jobs before this one (order=newest)"),
    "schedule": (AN_ID, "The jobs or events of one schedule"),
    "namespace": (
        {"type": "string", "pattern": NAME_RULE},
        f"The jobs, events or counts of one namespace (`{DEFAULT}`: the jobs naming none); a "
        "key limited to namespaces reads only its own (without it, all of them; another: "
        "nothing, as of a namespace without jobs)",
    ),
    "status_not": (
        {"enum": list(STATUSES)},
        "With `wait`: answer once the job's status is not this one",
    ),
    "stream": ({"enum": list(LOG_STREAMS)}, "One output stream (default both)"),
    "attempt": (
        {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPT},
        "An attempt's number (default the latest)",
    ),
    "follow": (
        {"enum": ["1", "0", "true", "false"]},
        "Stream on as events (/jobs/{job_id}/logs: default no; /events: default yes)",
    ),
    "job_id": (AN_ID, "One job's events"),
    "role": ({"enum": [role for role in NODE_ROLES if role]}, "The nodes of one role"),
    "window": ({"enum": list(ui_dashboard.WINDOWS)}, "The dashboard's window (default hour)"),
    "refresh": ({"enum": ["off"]}, "`off`: the page's refresh paused"),
    "q": (TEXT, "A search of the jobs list"),
    **{
        name: (A_COUNT, f"The bulk retry's redirect: {said.format('N')}")
        for name, said in ui_dead.NOTICES
    },
}

PATH: dict[str, Param] = {
    "job_id": (TEXT, "A job's id (job-N)"),
    "name": (AN_ID, "A schedule's name"),
    "node_id": (AN_ID, "A node's id"),
    "service_id": (AN_ID, "A service's id"),
    "namespace": (AN_ID, "A namespace's name (`default` for the default's)"),
    "action": (TEXT, "What the button does: drain or undrain (nodes), pause or resume"),
}

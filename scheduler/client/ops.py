"""Every operation of the client, each written once as a plan (steps.py): what it sends,
whether sending it again is safe (retrying.py), and how its answer is read. `Client` and
`AsyncClient` (blocking.py, aio.py) bind each as a method, blocking or awaited; its
docstring is the method's. They live by what they work on: jobs.py, watching.py, fleet.py,
keys.py, quotas.py.
"""

from __future__ import annotations

from scheduler.client.calls import PAGE as PAGE
from scheduler.client.fleet import (
    add_schedule,
    delete_schedule,
    drain,
    nodes,
    pause_schedule,
    resume_schedule,
    schedule,
    schedules,
    undrain,
)
from scheduler.client.jobs import (
    attempts,
    cancel,
    job,
    jobs,
    place,
    retry,
    retry_many,
    submit,
    submit_many,
    wait,
    watch,
)
from scheduler.client.keys import add_key, audit, named_keys, revoke_key
from scheduler.client.quotas import change_quota, namespaces, set_quota
from scheduler.client.watching import events, follow_logs, logs

__all__ = [
    "OPERATIONS",
    "PAGE",
    "add_key",
    "add_schedule",
    "attempts",
    "audit",
    "cancel",
    "change_quota",
    "delete_schedule",
    "drain",
    "events",
    "follow_logs",
    "job",
    "jobs",
    "logs",
    "named_keys",
    "namespaces",
    "nodes",
    "pause_schedule",
    "place",
    "resume_schedule",
    "retry",
    "retry_many",
    "revoke_key",
    "schedule",
    "schedules",
    "set_quota",
    "submit",
    "submit_many",
    "undrain",
    "wait",
    "watch",
]

OPERATIONS = (
    submit,
    submit_many,
    job,
    jobs,
    watch,
    wait,
    cancel,
    retry,
    retry_many,
    attempts,
    place,
    logs,
    follow_logs,
    events,
    nodes,
    drain,
    undrain,
    add_schedule,
    schedules,
    schedule,
    pause_schedule,
    resume_schedule,
    delete_schedule,
    add_key,
    named_keys,
    revoke_key,
    audit,
    set_quota,
    change_quota,
    namespaces,
)

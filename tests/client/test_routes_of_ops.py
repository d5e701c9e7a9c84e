"""The client and the API agree: the request each operation sends first is one the route
table serves (routes.TABLE, as Starlette's router resolves it), with only the parameters its
endpoint reads. A route renamed or a parameter dropped on either side fails here, not in a
user's program (the answers each route gives are checked against their description in
tests/api/test_openapi.py, and decoded by the client in tests/client/test_client.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.routes import TABLE
from scheduler.client import ops
from scheduler.client.retrying import Policy
from scheduler.client.steps import Exchange, Open, PolicyAsk, Request

# Each operation with arguments that reach its first request.
CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "submit": (("echo",), {"priority": 1}),
    "submit_many": (([{"command": "a"}],), {}),
    "job": (("job-1",), {}),
    "jobs": ((), {"status": "failed", "node_id": "n1", "schedule": "s", "after": "job-1"}),
    "watch": (("job-1",), {}),
    "wait": (("job-1",), {}),
    "cancel": (("job-1",), {}),
    "retry": (("job-1",), {}),
    "retry_many": ((["job-1"],), {}),
    "attempts": (("job-1",), {}),
    "place": (("job-1",), {}),
    "logs": (("job-1",), {"stream": "stdout", "attempt": 2}),
    "follow_logs": (("job-1",), {"stream": "stderr", "attempt": 1}),
    "events": (
        (),
        {
            "job_id": "job-1",
            "node_id": "n",
            "status": "done",
            "schedule": "s",
            "after": "1-0",
            "follow": False,
        },
    ),
    "nodes": ((), {"role": "compute"}),
    "drain": (("n1",), {}),
    "undrain": (("n1",), {}),
    "add_schedule": (("nightly", {"command": "x"}), {"cron": "0 3 * * *"}),
    "schedules": ((), {}),
    "schedule": (("nightly",), {}),
    "pause_schedule": (("nightly",), {}),
    "resume_schedule": (("nightly",), {}),
    "delete_schedule": (("nightly",), {}),
    "add_key": (("ci",), {"role": "submitter"}),
    "named_keys": ((), {}),
    "revoke_key": (("ci",), {}),
    "audit": ((), {"limit": 5}),
    "set_quota": (("team-a",), {"running": 2, "cpus": 8}),
    "change_quota": (("team-a",), {"cpus": 0}),
    "namespaces": ((), {}),
}


def first_request(name: str) -> Request:
    args, kwargs = CALLS[name]
    plan = getattr(ops, name)(*args, **kwargs)
    answer: Any = None
    while True:
        step = plan.send(answer)
        answer = Policy() if isinstance(step, PolicyAsk) else 0.0
        if isinstance(step, Exchange | Open):
            plan.close()
            return step.request


def test_every_operation_is_listed_here() -> None:
    assert set(CALLS) == {op.__name__ for op in ops.OPERATIONS}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_operation_sends_a_request_the_api_serves(name: str) -> None:
    request = first_request(name)
    resolved = TABLE.serving(request.method, request.path)
    assert resolved is not None, f"{name}: {request.method} {request.path} is no route"
    _, method, _ = resolved
    given = set(request.params)
    assert given <= set(method.reads), f"{name} sends {given - set(method.reads)}"

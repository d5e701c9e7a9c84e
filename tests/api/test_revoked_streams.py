"""Issue 41, named keys: a follower's stream (GET /events, a job's output followed) opened with
a named key ends once the key is revoked, rather than streaming on until FOLLOW_MAX_SECS (ten
minutes by default): its client reconnects, and the door refuses the revoked key."""

from __future__ import annotations

import httpx
import pytest

from tests.api.test_roles import ADMIN_KEY, AS_ADMIN, as_key
from tests.conftest import Serve

NODE = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}


@pytest.mark.parametrize("path", ["/events", "/jobs/job-1/logs?follow=1"])
def test_a_revoked_keys_stream_ends_at_its_next_event(serve: Serve, path: str) -> None:
    url = serve(api_key=ADMIN_KEY, follow_max_secs=3600)
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/nodes/register", json=NODE, headers=AS_ADMIN).status_code == 201
        assert http.post("/jobs", json={"command": "x"}, headers=AS_ADMIN).status_code == 201
        made = http.post("/keys", json={"name": "watcher", "role": "reader"}, headers=AS_ADMIN)
        reader = as_key(made.json()["key"])
        with http.stream("GET", path, headers=reader) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines).startswith(("retry:", "id: "))
            assert http.delete("/keys/watcher", headers=AS_ADMIN).status_code == 204
            # A change the stream would tell: the job running (its status, its event).
            running = {"status": "running", "node_id": "n1"}
            assert http.patch("/jobs/job-1", json=running, headers=AS_ADMIN).status_code == 200
            told = next((line for line in lines if '"running"' in line), None)
        assert told is None, f"a revoked key was told: {told}"
        assert http.get(path, headers=reader).status_code == 401

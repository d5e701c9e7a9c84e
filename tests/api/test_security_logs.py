"""Live output and events tried as an attacker would: in token mode only the node running a job
writes its output (another node's token, a made-up one, none: refused, nothing held); the
output and the events are the key's to read (never a node token's); through both fronts."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.store.keys import Keys
from tests.conftest import BOTH_FRONTS, ClientFactory, assert_json

pytestmark = BOTH_FRONTS

KEY = "operator-key-" + "x" * 30
OPERATOR = {"Authorization": f"Bearer {KEY}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def chunk(node: str, data: str = "secret output\n", offset: int = 0) -> dict[str, Any]:
    return {"node_id": node, "stream": "stdout", "offset": offset, "data": data}


@pytest.fixture
def fleet(make_client: ClientFactory) -> tuple[Any, dict[str, str], str]:
    """Token mode: nodes n1 and n2 registered, job-1 running on n1."""
    api = make_client(api_key=KEY, agent_auth="token")
    tokens = {}
    for node in ("n1", "n2"):
        body = {"id": node, "hostname": node, "cpu_count": 2, "role": "compute"}
        tokens[node] = assert_json(api.post("/nodes/register", json=body, headers=OPERATOR), 201)[
            "token"
        ]
    job = assert_json(api.post("/jobs", json={"command": "x"}, headers=OPERATOR), 201)
    assert job["node_id"] == "n1"
    claim = {"status": "running", "node_id": "n1"}
    assert api.patch("/jobs/job-1", json=claim, headers=bearer(tokens["n1"])).status_code == 200
    return api, tokens, job["job_id"]


def test_only_the_running_node_writes_its_jobs_output(
    fleet: Any, rclient: Any, prefix: str
) -> None:
    api, tokens, job_id = fleet
    url = f"/jobs/{job_id}/output"
    attempts = [
        ({}, chunk("n1"), 401),  # no token
        (bearer("made-up"), chunk("n1"), 401),
        (bearer(tokens["n2"]), chunk("n1"), 404),  # another node's token: as if no such job
        (bearer(tokens["n2"]), chunk("n2"), 404),
    ]
    for headers, body, status in attempts:
        assert api.post(url, json=body, headers=headers).status_code == status, (headers, body)
    assert not rclient.exists(Keys(prefix).job_log(job_id))
    # Its own node's token: held; the node_id in the body cannot point it elsewhere.
    assert assert_json(api.post(url, json=chunk("n1"), headers=bearer(tokens["n1"]))) == {
        "offset": 14
    }
    assert (
        api.post(url, json=chunk("n2", offset=14), headers=bearer(tokens["n1"])).status_code == 404
    )


def test_the_output_and_events_are_the_keys_alone(fleet: Any) -> None:
    api, tokens, job_id = fleet
    api.post(f"/jobs/{job_id}/output", json=chunk("n1"), headers=bearer(tokens["n1"]))
    for path in (f"/jobs/{job_id}/logs", f"/jobs/{job_id}/logs?follow=1", "/events?follow=0"):
        for headers in ({}, bearer(tokens["n1"]), bearer("made-up")):
            response = api.get(path, headers=headers)
            assert response.status_code == 401, (path, headers)
            assert "secret" not in response.text
    assert api.get(f"/jobs/{job_id}/logs", headers=OPERATOR).text == "secret output\n"

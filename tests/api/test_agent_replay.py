"""The Rust agent's exact requests (CONTRACT 3.2-3.3) against the built-in registry, byte for
byte, and its view of the answers: the poll must parse into the agent's job struct and hold no
null anywhere."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

from tests.conftest import ClientFactory, assert_json, null_paths

NODE = "ip-10-0-0-7.internal"
JSON = {"content-type": "application/json"}
RUNNING = b'{"status":"running","exit_code":null,"stdout":"","stderr":""}'


class AgentJob(msgspec.Struct):
    """What the agent reads from a poll. Every field but job_id and command is optional, and
    none may be null: the types below reject one, as the agent does."""

    job_id: str
    command: str
    node_id: str = ""
    instance_id: str = ""
    deploy_url: str = ""
    job_type: str = ""
    port: int = 0
    env_vars: dict[str, str] = {}
    status: str = ""
    retry_count: int = 0


def agent_poll(api: TestClient) -> list[AgentJob]:
    response = api.get(f"/jobs?node_id={NODE}&status=pending")
    assert response.status_code == 200
    assert null_paths(response.json()) == []
    return msgspec.json.decode(response.content, type=list[AgentJob])


def agent_start(api: TestClient) -> None:
    """Startup (3.2) and the first tick's registry call (3.3 step 1)."""
    body = f'{{"id":"{NODE}","hostname":"{NODE}","cpu_count":4,"role":"compute"}}'
    node = assert_json(api.post("/nodes/register", content=body.encode(), headers=JSON), 201)
    assert node["id"] == NODE and node["status"] == "healthy"
    beat = api.post("/nodes/heartbeat", content=f'{{"id":"{NODE}"}}'.encode(), headers=JSON)
    assert assert_json(beat)["status"] == "healthy"
    instances = api.get(f"/instances?node_id={NODE}")
    # The agent skips the tick only for a non-empty list without a running instance; an
    # error or non-2xx counts as an empty list.
    assert instances.status_code != 200 or instances.json() == []


def agent_report(api: TestClient, job_id: str, body: bytes) -> dict[str, Any]:
    job: dict[str, Any] = assert_json(api.patch(f"/jobs/{job_id}", content=body, headers=JSON))
    assert null_paths(job) == []
    return job


def operator(api: TestClient, body: dict[str, Any], key: str = "") -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    job = assert_json(api.post("/jobs", json=body, headers=headers), 201)
    assert job["node_id"] == NODE
    job_id: str = job["job_id"]
    return job_id


@pytest.mark.parametrize("key", ["", "sekret"])
def test_agent_runs_a_job_to_done(make_client: ClientFactory, key: str) -> None:
    api = make_client(api_key=key)
    agent_start(api)
    assert agent_poll(api) == []
    job_id = operator(api, {"command": "echo hi", "env_vars": {"TINYAWS_EVENT": '{"a":1}'}}, key)
    polled = agent_poll(api)
    assert [(j.job_id, j.command, j.env_vars) for j in polled] == [
        (job_id, "echo hi", {"TINYAWS_EVENT": '{"a":1}'})
    ]
    running = agent_report(api, job_id, RUNNING)
    assert running["status"] == "running" and "exit_code" not in running
    assert agent_poll(api) == []  # MAX_JOBS_PER_NODE=1 and the node is busy
    done = agent_report(
        api, job_id, b'{"status":"done","exit_code":0,"stdout":"hi\\n","stderr":""}'
    )
    assert done["status"] == "done" and done["exit_code"] == 0 and done["stdout"] == "hi\n"
    assert "stderr" not in done
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    assert assert_json(api.get(f"/jobs/{job_id}", headers=headers)) == done


def test_agent_failure_is_retried_once_on_the_same_node(make_client: ClientFactory) -> None:
    api = make_client()
    agent_start(api)
    job_id = operator(api, {"command": "exit 3"})
    for attempt, status in enumerate(["pending", "failed"]):
        (polled,) = agent_poll(api)
        assert (polled.job_id, polled.retry_count) == (job_id, attempt)
        agent_report(api, job_id, RUNNING)
        body = b'{"status":"failed","exit_code":3,"stdout":"","stderr":"boom\\n"}'
        job = agent_report(api, job_id, body)
        assert job["status"] == status and job["node_id"] == NODE
    assert job["exit_code"] == 3 and job["stderr"] == "boom\n" and job["retry_count"] == 1
    assert agent_poll(api) == []


def test_agent_deploys_a_service_beside_run_jobs(make_client: ClientFactory) -> None:
    api = make_client()
    agent_start(api)
    url = "http://127.0.0.1:7001/buckets/deployments/objects/web.zip"
    service = operator(api, {"deploy_url": url, "command": "", "job_type": "service", "port": 8081})
    (polled,) = agent_poll(api)
    assert (polled.job_id, polled.command, polled.deploy_url) == (service, "", url)
    assert (polled.job_type, polled.port) == ("service", 8081)
    agent_report(api, service, RUNNING)
    batch = operator(api, {"command": "date"})
    assert [j.job_id for j in agent_poll(api)] == [batch]
    done = b'{"status":"done","exit_code":0,"stdout":"","stderr":""}'
    assert agent_report(api, service, done)["status"] == "done"


def test_agent_heartbeat_of_an_unknown_node_is_404(client: TestClient) -> None:
    beat = client.post("/nodes/heartbeat", content=b'{"id":"ghost"}', headers=JSON)
    assert beat.status_code == 404 and beat.text == "node not found\n"


def test_newer_agent_registration_with_addr(client: TestClient) -> None:
    body = b'{"id":"n1","hostname":"n1","cpu_count":8,"role":"compute","addr":"10.0.0.7:8080"}'
    node = assert_json(client.post("/nodes/register", content=body, headers=JSON), 201)
    assert (node["addr"], node["cpu_count"], node["role"]) == ("10.0.0.7:8080", 8, "compute")
    assert assert_json(client.get("/nodes?role=compute"))["n1"]["addr"] == "10.0.0.7:8080"

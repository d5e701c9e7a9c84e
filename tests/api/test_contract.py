"""CONTRACT 2.2-2.4 on the wire: the job routes' fields, status codes, bodies and headers, the
original's Go decoding leniency, and Redis being down. The listing is in test_listing.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)
from tests.redis_server import free_port

# Each test runs through ASGI and through the hot lane (tests/conftest.py, front).
pytestmark = BOTH_FRONTS

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
ALWAYS = {"job_id", "node_id", "command", "status", "retry_count", "created_at"}


@pytest.fixture
def api(client: TestClient) -> TestClient:
    register(client, "n1")
    return client


# Health, submission and the emptiness rules of the Job object (2.2).


def test_health(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.content == b'{"service":"scheduler","status":"healthy"}\n'
    assert response.headers["content-type"] == "application/json"


def test_submit_answers_201_with_only_the_always_present_fields(api: TestClient) -> None:
    job = assert_json(api.post("/jobs", json={"command": "echo hi"}), 201)
    assert set(job) == ALWAYS
    assert job["job_id"] == "job-1"
    assert job["node_id"] == "n1"
    assert job["command"] == "echo hi"
    assert job["status"] == "pending"
    assert job["retry_count"] == 0
    assert RFC3339_UTC.fullmatch(job["created_at"])
    assert assert_json(api.get("/jobs/job-1")) == job


def test_submit_echoes_the_optional_fields_as_submitted(api: TestClient) -> None:
    body = {
        "command": "",
        "deploy_url": "http://store:7001/buckets/deployments/objects/app.zip",
        "env_vars": {"GREETING": "hi", "Mixed_Case": "x y"},
        "job_type": "service",
        "port": 8080,
    }
    job = assert_json(api.post("/jobs", json=body), 201)
    assert set(job) == ALWAYS | {"deploy_url", "env_vars", "job_type", "port"}
    assert job["command"] == ""  # always present, even empty (deploy jobs)
    assert {k: job[k] for k in body} == body
    assert assert_json(api.get(f"/jobs/{job['job_id']}")) == job


def test_fields_survive_every_transition(api: TestClient) -> None:
    """The Lua scripts re-encode the job; nothing submitted may change or go missing."""
    body = {
        "command": "",
        "deploy_url": "http://store/buckets/deployments/objects/a%20b.zip?x=1&y=/2",
        "env_vars": {"URL": "http://x/y", "QUOTE": '"\\', "EMPTY": ""},
        "job_type": "run",
        "port": 65535,
    }
    job = submit(api, **body)
    for status, extra in [("running", {}), ("done", {"exit_code": 0})]:
        job = assert_json(report(api, job["job_id"], status, **extra))
        assert {k: job[k] for k in body} == body
        assert set(job) >= ALWAYS


@pytest.mark.parametrize("job_type", ["", "run"])
def test_job_type_is_not_defaulted_on_submit(api: TestClient, job_type: str) -> None:
    job = submit(api, command="x", job_type=job_type)
    assert job.get("job_type", "") == job_type
    assert "port" not in job and "env_vars" not in job


def test_ids_count_up_from_job_1(api: TestClient) -> None:
    assert [submit(api, command=f"c{i}")["job_id"] for i in range(3)] == [
        "job-1",
        "job-2",
        "job-3",
    ]


def test_exit_code_is_omitted_while_null_and_emitted_when_zero(api: TestClient) -> None:
    job_id = submit(api, command="true")["job_id"]
    running = assert_json(report(api, job_id, "running"))
    assert "exit_code" not in running and "finished_at" not in running
    assert RFC3339_UTC.fullmatch(running["running_at"])
    done = assert_json(report(api, job_id, "done", exit_code=0))
    assert done["exit_code"] == 0
    assert "stdout" not in done and "stderr" not in done
    assert RFC3339_UTC.fullmatch(done["finished_at"])
    assert assert_json(api.get(f"/jobs/{job_id}")) == done


def test_get_unknown_job_is_404(api: TestClient) -> None:
    assert_text_error(api.get("/jobs/job-99"), 404, "job not found")


def test_schedule_names_a_node(api: TestClient) -> None:
    assert assert_json(api.get("/schedule")) == {"node_id": "n1"}


def test_no_healthy_node_is_503(client: TestClient) -> None:
    assert_text_error(client.get("/schedule"), 503, "no healthy compute nodes")
    refused = client.post("/jobs", json={"command": "x"})
    assert_text_error(refused, 503, "no healthy compute nodes")
    # It stands until a node comes: no Retry-After (a client need not try again at once).
    assert "retry-after" not in refused.headers
    assert client.get("/jobs").content == b"[]\n"


# The router (2.3): unknown paths, wrong methods, HEAD.


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/nope"),
        ("GET", "/jobs/job-1/extra"),
        ("GET", "/jobs/"),
        ("GET", "/health/"),
        ("GET", "/v1/jobs"),
        ("POST", "/job"),
        ("DELETE", "/nodes/n1/extra"),
    ],
)
def test_unknown_path_is_404_page_not_found(api: TestClient, method: str, path: str) -> None:
    assert_text_error(api.request(method, path), 404, "404 page not found")


@pytest.mark.parametrize(
    "method, path, allowed",
    [
        ("POST", "/health", {"GET", "HEAD"}),
        ("DELETE", "/jobs", {"GET", "HEAD", "POST"}),
        ("PUT", "/jobs", {"GET", "HEAD", "POST"}),
        ("PUT", "/jobs/job-1", {"GET", "HEAD", "PATCH", "DELETE"}),  # DELETE: cancel (ours)
        ("POST", "/schedule", {"GET", "HEAD"}),
        ("GET", "/nodes/heartbeat", {"POST"}),
        ("POST", "/nodes", {"GET", "HEAD"}),
        ("POST", "/nodes/n1", {"DELETE"}),
        ("POST", "/instances", {"GET", "HEAD"}),
    ],
)
def test_wrong_method_is_405_with_allow(
    api: TestClient, method: str, path: str, allowed: set[str]
) -> None:
    response = api.request(method, path)
    assert_text_error(response, 405, "Method Not Allowed")
    assert {m.strip() for m in response.headers["allow"].split(",")} == allowed


@pytest.mark.parametrize(
    "path", ["/health", "/jobs", "/jobs?node_id=n1&status=pending", "/jobs/job-1", "/nodes"]
)
def test_get_routes_answer_head(api: TestClient, path: str) -> None:
    submit(api, command="x")
    response = api.head(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == b""
    assert int(response.headers["content-length"]) == len(api.get(path).content)


def test_head_of_unknown_job_is_404(api: TestClient) -> None:
    assert api.head("/jobs/job-9").status_code == 404


# Go-style decoding of POST /jobs (2.2, 2.4 step 1).


@pytest.mark.parametrize(
    "body, expected",
    [
        (b'{"Command":"echo hi"}', {"command": "echo hi"}),
        (
            b'{"COMMAND":"a","Port":80,"JOB_TYPE":"run","Env_Vars":{"Foo":"1"}}',
            {"command": "a", "port": 80, "job_type": "run", "env_vars": {"Foo": "1"}},
        ),
        (b'{"command":"a","x":null}', {"command": "a"}),  # null is absent, even unknown
        (b'{"command":"a"} trailing garbage', {"command": "a"}),
        (b'{"command":"a"}{"command":"b"}', {"command": "a"}),
        (b'  {"command":"a"}\n\n', {"command": "a"}),
        (b'{"command":"a","port":null,"env_vars":null,"job_type":null}', {"command": "a"}),
        (b'{"command":"a","command":"b"}', {"command": "b"}),
    ],
)
def test_submit_decodes_like_go(api: TestClient, body: bytes, expected: dict[str, Any]) -> None:
    job = assert_json(api.post("/jobs", content=body), 201)
    assert {k: job[k] for k in expected} == expected
    assert set(job) == ALWAYS | set(expected)


NOT_JSON = "body: not valid JSON"
EMPTY = "body: empty (send a JSON object)"
AN_OBJECT = "body: must be a JSON object, got"


# The original's `failed to decode job`, then which field and what it must be (issue 38).
@pytest.mark.parametrize(
    "body, detail",
    [
        (b"", EMPTY),
        (b"   ", EMPTY),
        (b"{", f"{NOT_JSON} (it ends inside a value)"),
        (b'{"command":"a"', f"{NOT_JSON} (it ends inside a value)"),
        (b"not json", f"{NOT_JSON} (invalid character at byte 4)"),
        (b"[]", f"{AN_OBJECT} an array"),
        (b'["echo"]', f"{AN_OBJECT} an array"),
        (b'"echo"', f"{AN_OBJECT} a string"),
        (b"42", f"{AN_OBJECT} an integer"),
        (b'{"command":1}', "command: must be a string, got an integer"),
        (b'{"command":"a","port":"80"}', "port: must be an integer, got a string"),
        (b'{"command":"a","port":1.5}', "port: must be an integer, got a number"),
        (b'{"command":"a","port":80.0}', "port: must be an integer, got a number"),
        (b'{"command":"a","port":true}', "port: must be an integer, got a boolean"),
        (
            b'{"command":"a","env_vars":["A=1"]}',
            "env_vars: must be an object of strings, got an array",
        ),
        (
            b'{"command":"a","env_vars":{"A":1}}',
            "env_vars: must be an object of strings, got an integer at env_vars[...]",
        ),
        (
            b'{"command":"a","env_vars":"A=1"}',
            "env_vars: must be an object of strings, got a string",
        ),
        (b'{"command":["a"]}', "command: must be a string, got an array"),
        # Go ignored an unknown key; a typo was a job without what it asked for.
        (b'{"command":"a","unknown":{"deep":[1,null]}}', "unknown: unknown field"),
        (b'{"command":"a","Priorty":5}', "priorty: unknown field (did you mean priority?)"),
        # A field's first word, as the CLI's --env says env_vars.
        (b'{"command":"a","env":{"A":"1"}}', "env: unknown field (did you mean env_vars?)"),
        (b'{"command":"a","node":"n1"}', "node: unknown field (did you mean node_selector?)"),
        (b'{"command":"a","e":1}', "e: unknown field"),  # no field starts `e_`
    ],
)
def test_submit_decode_errors_are_400_and_create_nothing(
    api: TestClient, body: bytes, detail: str
) -> None:
    response = api.post("/jobs", content=body)
    assert_text_error(response, 400, f"failed to decode job: {detail}")
    assert response.headers["x-error-detail"] == detail
    assert api.get("/jobs").content == b"[]\n"


@pytest.mark.parametrize(
    "body", [b"null", b"{}", b'{"command":""}', b'{"command":null,"deploy_url":""}']
)
def test_submit_without_command_or_deploy_url_is_400(api: TestClient, body: bytes) -> None:
    assert_text_error(api.post("/jobs", content=body), 400, "command or deploy_url is required")
    assert api.get("/jobs").content == b"[]\n"
    assert submit(api, command="x")["job_id"] == "job-1"


# PATCH: decoding and the order of checks (2.4 steps 1-3). The original's messages, then
# what is wrong (issue 38).
UPDATE = "failed to decode update"
EXIT_CODE = "exit_code: must be an integer, got"
INVALID_STATUS = "invalid status: use one of running, done, failed, cancelled"


@pytest.mark.parametrize(
    "job_id, body, status, message",
    [
        ("job-404", b"", 400, f"{UPDATE}: {EMPTY}"),
        ("job-404", b"{", 400, f"{UPDATE}: {NOT_JSON} (it ends inside a value)"),
        ("job-404", b"[]", 400, f"{UPDATE}: {AN_OBJECT} an array"),
        ("job-404", b'{"status":"done","exit_code":1.5}', 400, f"{UPDATE}: {EXIT_CODE} a number"),
        ("job-404", b'{"status":"done","exit_code":"1"}', 400, f"{UPDATE}: {EXIT_CODE} a string"),
        (
            "job-404",
            b'{"status":"done","stdout":1}',
            400,
            f"{UPDATE}: stdout: must be a string, got an integer",
        ),
        ("job-404", b'{"status":"bogus"}', 400, INVALID_STATUS),
        ("job-404", b'{"status":"pending"}', 400, INVALID_STATUS),
        ("job-404", b'{"status":"RUNNING"}', 400, INVALID_STATUS),
        ("job-404", b"{}", 400, INVALID_STATUS),
        ("job-404", b"null", 400, INVALID_STATUS),
        ("job-404", b'{"status":"running"}', 404, "job not found"),
        ("job-404", b'{"status":"done","exit_code":0}', 404, "job not found"),
        ("job-1", b'{"status":"bogus"}', 400, INVALID_STATUS),
        ("job-1", b'{"status":"running","exit_code":1.5}', 400, f"{UPDATE}: {EXIT_CODE} a number"),
    ],
)
def test_patch_checks_decode_then_status_then_existence(
    api: TestClient, job_id: str, body: bytes, status: int, message: str
) -> None:
    before = submit(api, command="x")
    assert_text_error(api.patch(f"/jobs/{job_id}", content=body), status, message)
    assert assert_json(api.get("/jobs/job-1")) == before


@pytest.mark.parametrize(
    "body",
    [
        b'{"Status":"running","EXIT_CODE":null,"StdOut":"","STDERR":""}',
        b'{"status":"running","agent":"x"} trailing',
        b'{"status":"running"}{"status":"done"}',
    ],
)
def test_patch_decodes_like_go(api: TestClient, body: bytes) -> None:
    submit(api, command="x")
    assert assert_json(api.patch("/jobs/job-1", content=body))["status"] == "running"


# Redis down: a clear 503, never a 500.


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/jobs", {"command": "x"}),
        ("GET", "/jobs", None),
        ("GET", "/jobs?node_id=n1&status=pending", None),
        ("GET", "/jobs/job-1", None),
        ("PATCH", "/jobs/job-1", {"status": "running"}),
        ("GET", "/schedule", None),
        ("POST", "/nodes/register", {"id": "n1"}),
        ("POST", "/nodes/heartbeat", {"id": "n1"}),
        ("GET", "/nodes", None),
        ("DELETE", "/nodes/n1", None),
    ],
)
def test_redis_down_is_503_store_unavailable(
    make_client: ClientFactory, method: str, path: str, body: Any
) -> None:
    api = make_client(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    answer = api.request(method, path, json=body)
    assert_text_error(answer, 503, "store unavailable")
    assert answer.headers["retry-after"] == "1"  # a moment's: the Python client tries again
    assert api.get("/health").status_code == 200

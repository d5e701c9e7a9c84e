"""The hot lane (scheduler/api/lane.py, server.LaneProtocol) against hostile and odd HTTP.

Every request goes to a lane server and to an ASGI server (OneWriteProtocol) with the same
settings, and the answers (status, headers but `date`, body), and whether the connection
then still serves a request, must be the same. Each case also says how many requests the
lane itself must have served, so a case cannot pass by both fronts going through ASGI."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from scheduler.api.app import create_app
from scheduler.api.guesses import Credentials
from scheduler.api.lane import Lane
from scheduler.api.params import parse_query
from scheduler.api.routes import TABLE
from scheduler.api.routing import Access
from scheduler.api.server import LaneProtocol, OneWriteProtocol
from scheduler.config import Settings
from tests.api.test_lane import normalized
from tests.conftest import SettingsFactory
from tests.redis_server import free_port
from tests.servers import serving

KEY = "lane-key"
BEARER = f"Bearer {KEY}"
KEYED = f"Authorization: {BEARER}"
PROBE = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
CLOSED, SILENT = b"<closed>", b"<silent>"
JOB = b'{"command":"hi"}'  # 16 bytes
RUNNING = b'{"status":"running"}'  # 20 bytes


@dataclass(frozen=True)
class Front:
    port: int
    app: Any

    @property
    def served(self) -> int:
        return int(self.app.state.lane.served)


@contextlib.contextmanager
def two_servers(base: Settings, **overrides: Any) -> Iterator[tuple[Front, Front]]:
    """`base` + `overrides` through the lane and through ASGI, each on a key prefix of its
    own: (lane, asgi)."""
    with contextlib.ExitStack() as stack:
        made = []
        for protocol in (LaneProtocol, OneWriteProtocol):
            prefix = f"{base.redis_prefix}-{protocol.__name__}"
            settings = dataclasses.replace(base, **{**overrides, "redis_prefix": prefix})
            app = create_app(settings)
            made.append(Front(stack.enter_context(serving(app, protocol)), app))
        yield made[0], made[1]


@contextlib.contextmanager
def keyed_pair(redis_url: str, data: Path) -> Iterator[tuple[Front, Front]]:
    """Key set, token mode, 1 KiB submits; node n1 registered and its pending job-1, and a
    storage node n2, through the lane and through ASGI: (lane, asgi)."""
    base = Settings.from_env(
        {},
        redis_url=redis_url,
        redis_prefix=f"t{uuid.uuid4().hex[:12]}",
        scheduler_db=str(data / "scheduler.db"),
        api_key=KEY,
        agent_auth="token",
        max_body_bytes=1024,
        # The cases send hundreds of wrong keys from 127.0.0.1: none of them is about the
        # limit on those (tests/api/test_security_ui.py is).
        auth_failures_max=1_000_000,
        allowed_hosts="t",  # the raw requests' Host
    )
    with two_servers(base) as pair:
        for front in pair:
            url, auth = f"http://127.0.0.1:{front.port}", {"Authorization": BEARER}
            httpx.post(f"{url}/nodes/register", json={"id": "n1"}, headers=auth)
            assert httpx.post(f"{url}/jobs", json={"command": "x"}, headers=auth).status_code == 201
            # The cases' long-polls: held for a registered node only; storage, so no job
            # goes to it.
            storage = {"id": "n2", "role": "storage"}
            httpx.post(f"{url}/nodes/register", json=storage, headers=auth)
        yield pair


@pytest.fixture(scope="module")
def fronts(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Front, Front]]:
    """keyed_pair, one for the module: every case runs on both, so both keep the same
    state."""
    with keyed_pair(redis_url, Path(tmp_path_factory.mktemp("lane"))) as pair:
        yield pair


def responses(sock: socket.socket, buffer: bytes, count: int) -> tuple[list[bytes], bytes]:
    """Up to `count` whole responses (none to a HEAD, please) off `sock`, then CLOSED or
    SILENT if it ended first; and what was left over."""
    got: list[bytes] = []
    while len(got) < count:
        if b"\r\n\r\n" in buffer:
            head, rest = buffer.split(b"\r\n\r\n", 1)
            found = re.search(rb"content-length: (\d+)", head)
            size = int(found.group(1)) if found else 0
            if len(rest) >= size:
                got.append(head + b"\r\n\r\n" + rest[:size])
                buffer = rest[size:]
                continue
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return [*got, SILENT], buffer
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return [*got, *([buffer] if buffer else []), CLOSED], b""
        buffer += chunk
    return got, buffer


Part = bytes | float  # bytes to send, or a pause in seconds


def converse(port: int, parts: list[Part], count: int = 1, timeout: float = 4.0) -> list[bytes]:
    """Send `parts` on one connection, read `count` answers, then a probe's (is the
    connection still serving?); normalized."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for part in parts:
            if isinstance(part, float):
                time.sleep(part)
            else:
                sock.sendall(part)
        got, rest = responses(sock, b"", count)
        if got[-1] not in (CLOSED, SILENT):
            try:
                sock.sendall(PROBE)
                got += responses(sock, rest, 1)[0]
            except OSError:
                got.append(CLOSED)
        return [normalized(a) for a in got]


def raw(line: str, *headers: str, body: bytes = b"") -> bytes:
    return ("\r\n".join([line, "Host: t", *headers]) + "\r\n\r\n").encode("latin-1") + body


def post(*headers: str, body: bytes = JOB, line: str = "POST /jobs HTTP/1.1") -> bytes:
    return raw(line, KEYED, *headers, body=body)


def sized(line: str, body: bytes) -> bytes:
    return raw(line, KEYED, f"Content-Length: {len(body)}", body=body)


GET1 = "GET /jobs/job-1 HTTP/1.1"
POLL = "GET /jobs?node_id=n1&status=pending HTTP/1.1"
MANY = "".join(f"&a{i}" for i in range(5000))  # parameters no route reads

# (id, request bytes, answers before the probe, requests the lane must serve)
SINGLE: list[tuple[str, bytes, int, int]] = [
    ("absolute-form", raw("GET http://evil.example/jobs/job-1 HTTP/1.1", KEYED), 1, 1),
    ("absolute-form-no-path", raw("GET http://evil.example HTTP/1.1", KEYED), 1, 0),
    ("absolute-form-poll", raw("GET http://h/jobs?node_id=n1&status=pending HTTP/1.1"), 1, 1),
    ("fragment", raw("GET /jobs/job-1#frag HTTP/1.1", KEYED), 1, 1),
    ("double-slash", raw("GET //jobs/job-1 HTTP/1.1", KEYED), 1, 0),
    ("dot-dot-as-id", raw("GET /jobs/.. HTTP/1.1", KEYED), 1, 1),
    ("dot-segment", raw("GET /jobs/./job-1 HTTP/1.1", KEYED), 1, 0),
    ("empty-query", raw("GET /jobs/job-1? HTTP/1.1", KEYED), 1, 1),
    ("semicolon-in-id", raw("GET /jobs/job-1;x=1 HTTP/1.1", KEYED), 1, 1),
    ("20k-id", raw("GET /jobs/" + "a" * 20000 + " HTTP/1.1", KEYED), 1, 1),
    ("non-ascii-path", raw("GET /jobs/j\xe9 HTTP/1.1", KEYED), 1, 0),
    ("no-key", raw(GET1), 1, 1),
    ("scheme-lowercase", raw(GET1, f"Authorization: bearer {KEY}"), 1, 1),
    ("header-name-upper", raw(GET1, f"AUTHORIZATION: {BEARER}"), 1, 1),
    ("key-trailing-ws", raw(GET1, f"Authorization: {BEARER} \t"), 1, 1),
    ("two-auth-bad-first", raw(GET1, "Authorization: x", KEYED), 1, 1),
    ("two-auth-good-first", raw(GET1, KEYED, "Authorization: x"), 1, 1),
    ("poll-plus", raw("GET /jobs?node_id=n+1&status=pending HTTP/1.1"), 1, 1),
    ("poll-semicolon", raw("GET /jobs?node_id=n1;status=pending HTTP/1.1"), 1, 0),
    ("poll-encoded", raw("GET /jobs?node%5Fid=n%31&status=pend%69ng HTTP/1.1"), 1, 1),
    ("poll-empty-params", raw("GET /jobs?&&node_id=n1&&status=pending&& HTTP/1.1"), 1, 1),
    # A repeated name: ASGI's door answers (400 for a parameter the route reads, params.py).
    ("poll-repeated", raw("GET /jobs?node_id=n1&status=pending&status=done HTTP/1.1"), 1, 0),
    ("poll-repeated-unread", raw("GET /jobs?node_id=n1&status=pending&x&x HTTP/1.1"), 1, 0),
    ("poll-blank-first", raw("GET /jobs?node_id=&node_id=n1&status=pending HTTP/1.1"), 1, 0),
    ("poll-wait-encoded", raw("GET /jobs?node_id=n1&status=pending&w%61it=x HTTP/1.1"), 1, 0),
    ("poll-nul-node", raw("GET /jobs?node_id=n1%00&status=pending HTTP/1.1"), 1, 1),
    ("poll-5000-params", raw(POLL.replace(" HTTP", MANY + " HTTP")), 1, 1),
    ("poll-with-key", raw(POLL, KEYED), 1, 1),
    ("http10-keep-alive", raw("GET /jobs/job-1 HTTP/1.0", KEYED, "Connection: keep-alive"), 1, 1),
    ("get-with-body", raw(GET1, KEYED, "Content-Length: 5", body=b"hello"), 1, 1),
    (
        "get-with-chunked-body",
        raw(GET1, KEYED, "Transfer-Encoding: chunked", body=b"5\r\nhello\r\n0\r\n\r\n"),
        1,
        1,
    ),
    ("cl-leading-zeros", post("Content-Length: 00016"), 1, 1),
    ("cl-30-zeros", post("Content-Length: " + "0" * 30 + "16"), 1, 1),
    ("cl-huge", post("Content-Length: 99999999999999999999999", body=b""), 1, 0),
    ("cl-junk", post("Content-Length: 1a"), 1, 0),
    ("cl-plus", post("Content-Length: +16"), 1, 0),
    ("cl-list", post("Content-Length: 16, 16"), 1, 0),
    ("cl-twice", post("Content-Length: 16", "Content-Length: 16"), 1, 0),
    (
        "cl-and-te",
        post(
            "Content-Length: 16",
            "Transfer-Encoding: chunked",
            body=b"10\r\n" + JOB + b"\r\n0\r\n\r\n",
        ),
        1,
        0,
    ),
    ("no-length", post(body=b""), 1, 0),
    ("cl-zero", post("Content-Length: 0", body=b""), 1, 1),
    ("post-with-query", post("Content-Length: 16", line="POST /jobs?x=1 HTTP/1.1"), 1, 1),
    ("post-http10", post("Content-Length: 16", line="POST /jobs HTTP/1.0"), 1, 1),
    ("body-longer-than-said", post("Content-Length: 16", body=JOB + b"XXXX"), 1, 1),
    ("no-key-with-body", raw("POST /jobs HTTP/1.1", "Content-Length: 16", body=JOB), 1, 1),
    ("expect-other", post("Expect: 200-ok", "Content-Length: 16"), 1, 1),
    ("over-max-body", post("Content-Length: 2000", body=b"x" * 2000), 1, 1),
    ("report-cl-zero", raw("PATCH /jobs/job-1 HTTP/1.1", "Content-Length: 0"), 1, 1),
    ("report-bad-id", raw("PATCH /jobs/bad!id HTTP/1.1", "Content-Length: 3", body=b"{}x"), 1, 1),
    (
        "report-huge-exit",
        sized("PATCH /jobs/job-1 HTTP/1.1", b'{"status":"done","exit_code":1e400}'),
        1,
        1,
    ),
    (
        "report-lone-surrogate",
        sized("PATCH /jobs/job-1 HTTP/1.1", b'{"status":"running","stdout":"\\ud800"}'),
        1,
        1,
    ),
    (
        "report-not-utf8",
        sized("PATCH /jobs/job-1 HTTP/1.1", b'{"status":"running","stdout":"\xff"}'),
        1,
        1,
    ),
    ("report-deep", sized("PATCH /jobs/job-1 HTTP/1.1", b"[" * 60000), 1, 1),
    ("report-trailing", sized("PATCH /jobs/job-1 HTTP/1.1", RUNNING + b" junk"), 1, 1),
    (
        "submit-nul-env",
        sized("POST /jobs HTTP/1.1", b'{"command":"x","env_vars":{"A\\u0000":"b"}}'),
        1,
        1,
    ),
    (
        "submit-unknown-instance",
        sized("POST /jobs HTTP/1.1", b'{"command":"x","instance_id":"i-1"}'),
        1,
        1,
    ),
]


@pytest.mark.parametrize(
    ("request_bytes", "count", "by_lane"), [c[1:] for c in SINGLE], ids=[c[0] for c in SINGLE]
)
def test_an_odd_request_is_answered_as_asgi_answers_it(
    fronts: tuple[Front, Front], request_bytes: bytes, count: int, by_lane: int
) -> None:
    lane, asgi = fronts
    before = lane.served
    assert converse(lane.port, [request_bytes], count) == converse(
        asgi.port, [request_bytes], count
    )
    assert lane.served - before == by_lane


# (id, parts sent on one connection, answers before the probe, requests the lane serves)
CONVERSATIONS: list[tuple[str, list[Part], int, int]] = [
    (
        "body-after-401-then-a-request",
        [raw("POST /jobs HTTP/1.1", "Content-Length: 16"), 0.1, JOB + raw(GET1, KEYED)],
        2,
        2,
    ),
    (
        "strangers-report-body-after-401",
        [raw("PATCH /jobs/job-1 HTTP/1.1", "Content-Length: 20"), 0.1, RUNNING],
        1,
        1,
    ),
    (
        "body-byte-by-byte",
        [post("Content-Length: 16", body=b""), *[p for b in JOB for p in (0.003, bytes([b]))]],
        1,
        1,
    ),
    (
        "big-get-body-after-the-answer",
        [raw(GET1, KEYED, "Content-Length: 300000"), 0.1, b"x" * 300000 + raw(GET1, KEYED)],
        2,
        2,
    ),
    (
        "pipelined-lane-and-asgi",
        [
            raw(GET1, KEYED)
            + raw("GET /jobs/job-1?x=1 HTTP/1.1", KEYED)
            + post("Content-Length: 16")
            + raw("GET /health HTTP/1.1")
            + sized("PATCH /jobs/job-9 HTTP/1.1", RUNNING)
            + raw(POLL, KEYED)
            + raw(GET1, KEYED, "Connection: close")
        ],
        7,
        1,
    ),
    (
        "lane-request-behind-a-waiting-long-poll",
        [
            raw("GET /jobs?node_id=n2&status=pending&wait=0.3 HTTP/1.1", KEYED),
            0.05,
            raw(GET1, KEYED),
        ],
        2,
        0,
    ),
    (
        "lane-request-after-a-long-poll",
        [
            raw("GET /jobs?node_id=n2&status=pending&wait=0.1 HTTP/1.1", KEYED),
            0.3,
            raw(GET1, KEYED),
        ],
        2,
        1,
    ),
    (
        "late-body-after-408",
        [
            sized("PATCH /jobs/job-1 HTTP/1.1", RUNNING)[:-10],
            0.5,
            RUNNING[10:] + raw(GET1, KEYED),
        ],
        2,
        2,
    ),
    (
        "http10-then-more",
        [raw("GET /jobs/job-1 HTTP/1.0", KEYED) + raw(GET1, KEYED)],
        1,
        1,
    ),
]


@pytest.mark.parametrize(
    ("parts", "count", "by_lane"),
    [c[1:] for c in CONVERSATIONS],
    ids=[c[0] for c in CONVERSATIONS],
)
def test_a_conversation_goes_as_it_goes_with_asgi(
    fronts: tuple[Front, Front],
    monkeypatch: pytest.MonkeyPatch,
    parts: list[Part],
    count: int,
    by_lane: int,
) -> None:
    monkeypatch.setattr("scheduler.api.http.BODY_READ_SECS", 0.3)
    lane, asgi = fronts
    before = lane.served
    assert converse(lane.port, parts, count) == converse(asgi.port, parts, count)
    assert lane.served - before == by_lane


def test_a_flood_of_pipelined_requests_never_read_is_answered_in_order(
    fronts: tuple[Front, Front],
) -> None:
    """The client sends 900 requests and reads nothing for a while, through a small receive
    buffer: the server's writes back up (flow control), and every answer still comes."""
    batch = [
        raw(GET1, KEYED),
        raw("GET /health HTTP/1.1"),
        raw(POLL, KEYED),
        raw("GET /jobs/job-1?x=1 HTTP/1.1", KEYED),
        raw("POST /jobs HTTP/1.1", "Content-Length: 16", body=JOB),
        sized("PATCH /jobs/job-9 HTTP/1.1", RUNNING),
    ]
    answers = []
    for front in fronts:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(30)
            sock.connect(("127.0.0.1", front.port))
            sock.sendall(b"".join(batch * 150))
            time.sleep(0.3)
            got, rest = responses(sock, b"", 900)
        assert len(got) == 900 and rest == b""
        answers.append([normalized(a) for a in got])
    assert answers[0] == answers[1]


def test_the_lane_counts_requests_as_asgi_does(fronts: tuple[Front, Front]) -> None:
    """Every odd request once more on both: /metrics then counts the same requests the same
    way (method, route label, code) through the lane as through ASGI."""

    def counts(front: Front) -> list[bytes]:
        url = f"http://127.0.0.1:{front.port}/metrics"
        lines = httpx.get(url, headers={"Authorization": BEARER}).content.splitlines()
        return sorted(x for x in lines if x.startswith(b"scheduler_http_requests_total{"))

    lane, asgi = fronts
    before = lane.served
    for _, request_bytes, count, _ in SINGLE:
        for front in fronts:
            converse(front.port, [request_bytes], count)
    assert lane.served - before == sum(case[3] for case in SINGLE)
    assert counts(lane) == counts(asgi)


def test_a_trickled_report_is_counted_against_the_budget_as_it_arrives(
    make_settings: SettingsFactory,
) -> None:
    """REPORT_BYTES_IN_FLIGHT counts report bytes as they arrive (README): with 1 KiB, one
    report holding 600 bytes of its 1000 leaves no room for a second one's 600 bytes: 503
    at once, as through ASGI. (The lane counts a body only once it is whole, so strangers'
    half-sent reports of up to 64 KiB each are held outside the budget.)"""
    limits = {"max_body_bytes": 1024, "max_report_bytes": 1024, "report_bytes_in_flight": 1024}
    half = raw("PATCH /jobs/job-1 HTTP/1.1", "Content-Length: 1000", body=b"{" + b" " * 599)
    answers = []
    with two_servers(make_settings(), **limits) as pair:
        for front in pair:
            url = f"http://127.0.0.1:{front.port}"
            httpx.post(f"{url}/nodes/register", json={"id": "n1"})
            assert httpx.post(f"{url}/jobs", json={"command": "x"}).status_code == 201
            with socket.create_connection(("127.0.0.1", front.port), timeout=5) as first:
                first.sendall(half)
                time.sleep(0.1)
                # Only the answer: the probe converse sends after it would be read as the
                # rest of the refused body, and wait out its timeout.
                with socket.create_connection(("127.0.0.1", front.port), timeout=30) as second:
                    second.sendall(half)
                    answers.append(normalized(responses(second, b"", 1)[0][0]))
    lane, asgi = answers
    assert asgi.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in asgi
    assert lane == asgi


REDIS_DOWN = [
    raw(GET1, KEYED),
    raw(GET1),
    raw(POLL, KEYED),
    raw(POLL, "Authorization: Bearer some-node-token"),
    raw(POLL),
    sized("POST /jobs HTTP/1.1", JOB),
    raw("POST /jobs HTTP/1.1", "Content-Length: 16", body=JOB),
    sized("PATCH /jobs/job-1 HTTP/1.1", RUNNING),
    raw(
        "PATCH /jobs/job-1 HTTP/1.1", "Authorization: Bearer x", "Content-Length: 20", body=RUNNING
    ),
]


@pytest.mark.parametrize("agent_auth", ["open", "token"])
def test_redis_down_is_store_unavailable_on_the_lane_as_on_asgi(
    make_settings: SettingsFactory, agent_auth: str
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = make_settings(redis_url=dead, api_key=KEY, agent_auth=agent_auth)
    with two_servers(settings) as (lane, asgi):
        through_lane = [converse(lane.port, [r]) for r in REDIS_DOWN]
        through_asgi = [converse(asgi.port, [r]) for r in REDIS_DOWN]
        assert lane.served == len(REDIS_DOWN)
    assert through_lane == through_asgi
    assert any(
        b"503 Service Unavailable" in a[0] and a[0].endswith(b"store unavailable\n")
        for a in through_lane
    )


def test_concurrent_clients_on_the_lane(fronts: tuple[Front, Front]) -> None:
    """20 keep-alive clients at once, each submitting, reading and polling: every answer is
    right, every new job id distinct."""
    lane = fronts[0]
    ids: list[str] = []
    errors: list[str] = []

    def client() -> None:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{lane.port}", headers={"Authorization": BEARER}
        ) as c:
            for _ in range(5):
                made = c.post("/jobs", content=JOB)
                if made.status_code != 201:
                    errors.append(made.text)
                    continue
                job_id = made.json()["job_id"]
                ids.append(job_id)
                if c.get(f"/jobs/{job_id}").json()["job_id"] != job_id:
                    errors.append(job_id)
                if c.get("/jobs", params={"node_id": "n1", "status": "pending"}).status_code != 200:
                    errors.append("poll")

    before = lane.served
    threads = [threading.Thread(target=client) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert len(ids) == len(set(ids)) == 100
    assert lane.served - before == 300


# The key rule: wherever the lane takes a request, it asks for the key exactly when
# BearerAuth would (the route table's access rule), over hostile queries too.
KEY_RULE = [
    ("GET", "/jobs", "node_id=n1&status=pending"),
    ("GET", "/jobs", "node%5Fid=n1&status=pending"),
    ("GET", "/jobs", "node_id=+&status=pending"),
    ("GET", "/jobs", "node_id=n1&status=pendin%67"),
    ("GET", "/jobs", "node_id=n1&&status=pending&=x"),
    ("GET", "/jobs", "%00=1&node_id=n1&status=pending"),
    ("GET", "/jobs/job-1", ""),
    ("GET", "/jobs/..", ""),
    ("PATCH", "/jobs/job-1", ""),
    ("POST", "/jobs", "node_id=n1&status=pending"),
]


@pytest.mark.parametrize(("method", "path", "query"), KEY_RULE)
def test_the_lane_asks_for_the_key_where_bearer_auth_does(
    method: str, path: str, query: str
) -> None:
    found = Lane(None, Credentials(KEY), None).route(method.encode(), path, query.encode())  # type: ignore[arg-type]
    assert found is not None
    assert (found[0].access is Access.KEY) is not TABLE.is_open(
        method, path, parse_query(query.encode())
    )

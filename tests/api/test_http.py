"""scheduler/http.py on its own: response shapes, the body bound, the open-route rule and the
bearer middleware, the one-route-per-path helper."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from scheduler.api.app import create_app
from scheduler.api.errors import exception_handlers
from scheduler.api.guesses import Credentials
from scheduler.api.http import (
    BearerAuth,
    ParamsDoor,
    json_array,
    json_bytes,
    read_body,
    text_error,
)
from scheduler.api.params import parse_query
from scheduler.api.routes import TABLE
from scheduler.api.routing import route
from scheduler.config import Settings

Headers = list[tuple[bytes, bytes]]


def test_text_error_is_shaped_like_go_http_error() -> None:
    response = text_error(409, "job already finished", {"X-Extra": "1"})
    assert response.status_code == 409
    assert response.body == b"job already finished\n"
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-extra"] == "1"


def test_json_bytes_ends_with_a_newline() -> None:
    response = json_bytes(b'{"a":1}', status=201)
    assert (response.status_code, response.body) == (201, b'{"a":1}\n')
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "items, body", [([], b"[]\n"), ([b"{}"], b"[{}]\n"), ([b"1", b"2"], b"[1,2]\n")]
)
def test_json_array(items: list[bytes], body: bytes) -> None:
    assert json_array(iter(items)).body == body


@pytest.mark.parametrize(
    "method, path, query, is_open",
    [
        ("GET", "/health", b"", True),
        ("HEAD", "/health", b"", True),
        ("POST", "/health", b"", False),
        ("GET", "/jobs", b"node_id=n1&status=pending", True),
        ("HEAD", "/jobs", b"node_id=n1&status=pending", True),
        ("GET", "/jobs", b"status=pending&node_id=n1&x=1", True),
        ("GET", "/jobs", b"node_id=n1&status=pending&status=done", True),
        ("GET", "/jobs", b"node_id=n1&status=done&status=pending", False),
        ("GET", "/jobs", b"node_id=&status=pending", False),
        ("GET", "/jobs", b"node_id=&node_id=n1&status=pending", False),
        ("GET", "/jobs", b"node_id=n1&status=&status=pending", False),
        ("GET", "/jobs", b"status=pending", False),
        ("GET", "/jobs", b"node_id=n1", False),
        ("GET", "/jobs", b"", False),
        ("GET", "/jobs", b"node_id=n1&status=Pending", False),
        ("POST", "/jobs", b"node_id=n1&status=pending", False),
        ("PATCH", "/jobs/job-1", b"", True),
        ("PATCH", "/jobs/", b"", False),
        ("PATCH", "/jobs", b"", False),
        ("GET", "/jobs/job-1", b"", False),
        ("POST", "/nodes/register", b"", True),
        ("POST", "/nodes/heartbeat", b"", True),
        ("GET", "/nodes/register", b"", False),
        ("GET", "/nodes", b"role=compute", False),
        ("DELETE", "/nodes/n1", b"", True),  # the key or the node's token: its handler checks
        ("GET", "/instances", b"node_id=n1", True),  # the agents' (issue 36): its handler checks
        ("GET", "/schedule", b"", False),
    ],
)
def test_the_table_says_which_calls_stay_open(
    method: str, path: str, query: bytes, is_open: bool
) -> None:
    assert TABLE.is_open(method, path, parse_query(query)) is is_open


async def _ok(request: Request) -> Response:
    return PlainTextResponse("ok")


class NoStore:
    """A store that cannot count: a wrong key's refusal stands (guesses.py)."""

    async def run(self, call: object) -> None:
        raise RedisError("no store in this test")


@pytest.fixture
def guarded() -> Iterator[TestClient]:
    app = Starlette(
        routes=[route("/jobs", GET=_ok, POST=_ok), route("/health", GET=_ok)],
        middleware=[
            Middleware(ParamsDoor, routes=TABLE),
            Middleware(BearerAuth, credentials=Credentials("k"), routes=TABLE),
        ],
    )
    app.state.store = NoStore()
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize(
    "authorization, allowed",
    [
        ("Bearer k", True),
        ("Bearer K", False),
        ("bearer k", False),
        ("Bearer  k", False),
        ("Bearer k ", False),
        ("Bearer", False),
        ("k", False),
        ("Basic k", False),
        ("", False),
    ],
)
def test_bearer_auth(guarded: TestClient, authorization: str, allowed: bool) -> None:
    response = guarded.get("/jobs", headers={"Authorization": authorization})
    if allowed:
        assert (response.status_code, response.text) == (200, "ok")
    else:
        assert (response.status_code, response.text) == (401, "unauthorized\n")
        assert response.headers["x-content-type-options"] == "nosniff"


def test_bearer_auth_lets_open_routes_through(guarded: TestClient) -> None:
    assert guarded.get("/health").text == "ok"
    assert guarded.get("/jobs?node_id=n1&status=pending").text == "ok"
    assert guarded.get("/jobs").status_code == 401


async def _echo_size(request: Request) -> Response:
    return PlainTextResponse(str(len(await read_body(request, 10))))


@pytest.fixture
def bounded() -> Iterator[TestClient]:
    app = Starlette(routes=[route("/b", POST=_echo_size)], exception_handlers=exception_handlers())
    with TestClient(app) as client:
        yield client


def test_read_body_within_the_limit(bounded: TestClient) -> None:
    assert bounded.post("/b", content=b"0123456789").text == "10"
    assert bounded.post("/b", content=b"").text == "0"


def test_read_body_over_the_limit_is_413(bounded: TestClient) -> None:
    response = bounded.post("/b", content=b"0123456789x")
    assert response.status_code == 413
    assert response.text == "request body too large (limit 10 bytes)\n"


def test_read_body_counts_streamed_chunks(bounded: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"012345"
        yield b"6789x"

    assert bounded.post("/b", content=chunks()).status_code == 413


def test_route_answers_head_with_get_and_405_lists_methods() -> None:
    app = Starlette(routes=[route("/r", GET=_ok, PATCH=_ok)])
    with TestClient(app) as client:
        head = client.head("/r")
        assert (head.status_code, head.content) == (200, b"")
        assert client.patch("/r").text == "ok"
        response = client.delete("/r")
        assert response.status_code == 405
        assert {m.strip() for m in response.headers["allow"].split(",")} == {
            "GET",
            "HEAD",
            "PATCH",
        }


# Straight ASGI calls: what TestClient cannot send (a forged Content-Length, a client that
# hangs up mid-body).

Message = dict[str, Any]


def _call(app: ASGIApp, method: str, path: str, parts: list[Message], headers: Headers) -> int:
    """Runs one request; returns the status sent (0 if none)."""
    sent: list[Message] = []
    pending = list(parts)

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 9001),
        "app": app,
    }
    anyio.run(app, scope, receive, send)
    return next((m["status"] for m in sent if m["type"] == "http.response.start"), 0)


def test_an_over_long_content_length_is_413_not_500() -> None:
    app = Starlette(routes=[route("/b", POST=_echo_size)], exception_handlers=exception_handlers())
    body = [{"type": "http.request", "body": b"x", "more_body": False}]
    for declared in (b"9" * 5000, b"0" * 5000 + b"11", b"11"):
        assert _call(app, "POST", "/b", body, [(b"content-length", declared)]) == 413
    assert _call(app, "POST", "/b", body, [(b"content-length", b"0" * 5000 + b"1")]) == 200


@pytest.mark.parametrize(
    "method, path", [("POST", "/jobs"), ("PATCH", "/jobs/job-1"), ("POST", "/nodes/register")]
)
def test_a_client_leaving_mid_body_is_one_info_line(
    settings: Settings, caplog: pytest.LogCaptureFixture, method: str, path: str
) -> None:
    app = create_app(settings)
    app.state.settings = settings  # the lifespan is not needed: the body is read first
    caplog.set_level(logging.INFO)
    half = [{"type": "http.request", "body": b'{"command": "ec', "more_body": True}]
    # A declared length, as clients send: an unsized report is checked in Redis first, and
    # this app has no lifespan (no store).
    headers = [(b"content-type", b"application/json"), (b"content-length", b"100")]
    _call(app, method, path, half, headers)
    assert [(r.levelno, r.exc_info) for r in caplog.records] == [(logging.INFO, None)]
    assert "went away" in caplog.records[0].getMessage()

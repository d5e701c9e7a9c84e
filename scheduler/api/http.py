"""HTTP plumbing shared by the routes: responses shaped like the original's, bounded bodies,
the auth rule and its middleware."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import parse_qs

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send


class HTTPError(Exception):
    """Ends a request with a plain-text error, as Go's http.Error wrote them."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def text_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        message + "\n",
        status_code=status,
        media_type="text/plain; charset=utf-8",
        headers={"X-Content-Type-Options": "nosniff", **(headers or {})},
    )


def json_bytes(body: bytes, status: int = 200) -> Response:
    """`body` is JSON already (msgspec or straight from Redis); Go's encoder ends with \\n."""
    return Response(body + b"\n", status_code=status, media_type="application/json")


def json_array(items: Iterable[bytes]) -> Response:
    return json_bytes(b"[" + b",".join(items) + b"]")


def _too_large(digits: str, limit: int) -> bool:
    # Length first: int() refuses more than 4300 digits (a ValueError, a 500).
    significant = digits.lstrip("0")
    return len(significant) > len(str(limit)) or int(significant or "0") > limit


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or 413 as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and _too_large(declared, limit):
        raise HTTPError(413, f"request body too large (limit {limit} bytes)")
    # ASGI messages read directly: Starlette's request.stream() async generator showed in
    # the submit profile.
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"request body too large (limit {limit} bytes)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def is_open_route(method: str, path: str, query: bytes) -> bool:
    """The calls that stay open when TINYAWS_API_KEY is set: what an agent must do without a
    key (the original Rust agent sends none) and the health check. Unlike the original, a
    GET /jobs that is not an agent poll needs the key: it exposes env_vars and output."""
    if path == "/health":
        return method in ("GET", "HEAD")
    if method == "PATCH":
        return path.startswith("/jobs/") and len(path) > len("/jobs/")
    if method == "POST":
        return path in ("/nodes/register", "/nodes/heartbeat")
    if method in ("GET", "HEAD") and path == "/jobs":
        params = parse_qs(query.decode("latin-1"), keep_blank_values=True)
        first = {name: values[0] for name, values in params.items()}  # as Go's Query().Get
        return bool(first.get("node_id")) and first.get("status") == "pending"
    return False


class BearerAuth:
    """Pure ASGI middleware: `Authorization: Bearer <key>` on every route but the open ones,
    compared in constant time."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        await text_error(401, "unauthorized")(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        if is_open_route(scope["method"], scope["path"], scope.get("query_string", b"")):
            return True
        for name, value in scope["headers"]:
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)
        return False


Endpoint = Callable[[Request], Awaitable[Response]]


def route(path: str, **by_method: Endpoint) -> Route:
    """One route per path, so a wrong method gets a 405 whose Allow header lists them all."""

    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await by_method[method](request)

    return Route(path, dispatch, methods=list(by_method))

"""HTTP plumbing shared by the routes: responses shaped like the original's, bounded bodies,
the door reading each request's parameters once, and the middleware asking for the key where
the route table says so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from redis.exceptions import RedisError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler.api.guesses import UNAUTHORIZED, Credentials, forbidden
from scheduler.api.params import PARAMS, Query, given_twice, parse_query, repeated
from scheduler.api.routing import Access, RouteTable, route_path
from scheduler.api.ui_session import UI_COOKIE as UI_COOKIE
from scheduler.api.ui_session import cookie_session, end_session, session_of
from scheduler.models.access_key import ADMIN, ANYONE, Principal, Role
from scheduler.store.errors import Unauthorized

# A path no route serves (or a page that does not exist), in Go's net/http words as the
# original answered it.
NOT_FOUND_PAGE = "404 page not found"


class HTTPError(Exception):
    """Ends a request with a plain-text error, as Go's http.Error wrote them."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


# The bodies the original decoded (docs/CONTRACT.md): their 400 keeps its words.
ORIGINAL_BODIES = frozenset({"job", "update", "node", "heartbeat"})


def undecodable(what: str, exc: Exception) -> HTTPError:
    """A body that does not decode, or breaks a field's rule: 400 `invalid <what>: <field>:
    <rule>`, which field and what it must be (models/rules.py), which X-Error-Detail repeats.
    A body of the original's (ORIGINAL_BODIES) says `failed to decode <what>: ...`, its
    message first, as its clients and anything matching it know it."""
    detail = str(exc)
    safe = detail.encode("ascii", "replace").decode()[:300].replace("\n", " ")
    said = "failed to decode" if what in ORIGINAL_BODIES else "invalid"
    return HTTPError(400, f"{said} {what}: {detail}", {"X-Error-Detail": safe})


def not_one_of(name: str, choices: Sequence[str]) -> HTTPError:
    """400 for a parameter outside its closed set, listing the set (`invalid status: use one
    of pending, ...`): a typo is told, not answered as a filter nothing matches."""
    return HTTPError(400, f"invalid {name}: use one of {', '.join(c for c in choices if c)}")


def one_of(name: str, value: str, choices: Sequence[str]) -> str:
    """`value` when it is "" (not given) or one of `choices`; else not_one_of's 400."""
    if value and value not in choices:
        raise not_one_of(name, choices)
    return value


def caller(request: Request) -> Principal:
    """Who made the call, as the door let it in (CALLER): ANYONE when no key is set. A call
    the door did not let in as someone (an agent route's, decided in its handler) is no
    one's here: Unauthorized."""
    found = request.scope.get(CALLER)
    if found is not None:
        assert isinstance(found, Principal)
        return found
    if request.app.state.credentials.has_key:
        raise Unauthorized()
    return ANYONE


def text_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        message + "\n",
        status_code=status,
        media_type="text/plain; charset=utf-8",
        headers={"X-Content-Type-Options": "nosniff", **(headers or {})},
    )


# Where the door leaves the caller it let in (a models.access_key.Principal) in the ASGI
# scope, for the handlers (`caller`): who made a call, and what a reader may not see.
CALLER = "tinyaws.caller"
NO_STORE = {"Cache-Control": "no-store"}  # an answer that may carry env_vars or output


def json_bytes(body: bytes, status: int = 200) -> Response:
    """`body` is JSON already (msgspec or straight from Redis); Go's encoder ends with \\n.
    Never cached: a job carries its env_vars and output (the lane's answers say it too)."""
    return Response(
        body + b"\n", status_code=status, media_type="application/json", headers=NO_STORE
    )


def json_array(items: Iterable[bytes]) -> Response:
    return json_bytes(b"[" + b",".join(items) + b"]")


MAX_NUMBER_CHARS = 20  # a query-string number; 2**53, the highest job number, has 16 digits


def whole_number(text: str, highest: int) -> int | None:
    """`text` as a whole number in 0..highest, else None. Over-long text is refused before
    int(): Python will not convert more than 4300 digits (a ValueError, which was a 500)."""
    if len(text) > MAX_NUMBER_CHARS or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= highest else None


HUGE = 2**63  # a declared length past every limit


def declared_length(request: Request) -> int | None:
    return length_of(request.headers.get("content-length", ""))


def length_of(declared: str) -> int | None:
    """Content-Length when it is a plain number, else None (chunked, or junk: "²" is a digit
    to str.isdigit). Its length is looked at before int(), which refuses more than 4300
    digits (a ValueError, a 500): past 18 significant digits it is HUGE."""
    if not (declared.isascii() and declared.isdigit()):
        return None
    significant = declared.lstrip("0")
    return HUGE if len(significant) > 18 else int(significant or "0")


def too_large(limit: int) -> HTTPError:
    return HTTPError(413, f"request body too large (limit {limit} bytes)")


# A body must arrive within this: a client trickling bytes holds a connection (and, for a
# report, part of REPORT_BYTES_IN_FLIGHT) only this long. 64 MiB at 1.2 MB/s still makes it.
BODY_READ_SECS = 60.0


def no_charge(size: int) -> None:
    return None


async def read_body(
    request: Request, limit: int, charge: Callable[[int], None] = no_charge
) -> bytes:
    """The request body, or 413 as soon as it is known to exceed `limit` bytes, or 408 when
    it has not arrived within BODY_READ_SECS. `charge` is told each chunk's size as it
    arrives (and may refuse it by raising)."""
    refuse_declared(declared_length(request), limit)
    try:
        async with asyncio.timeout(BODY_READ_SECS):
            return await _read_chunks(request, limit, charge)
    except TimeoutError:
        raise body_late() from None


def refuse_declared(declared: int | None, limit: int) -> None:
    """413 at once when the declared size is over `limit`: not a byte is read."""
    if declared is not None and declared > limit:
        raise too_large(limit)


def body_late() -> HTTPError:
    return HTTPError(408, f"request body not received within {BODY_READ_SECS:.0f} s")


async def _read_chunks(request: Request, limit: int, charge: Callable[[int], None]) -> bytes:
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
            raise too_large(limit)
        charge(len(chunk))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ParamsDoor:
    """Pure ASGI middleware, outside the key's: parses the request's query once
    (params.parse_query) into the scope (params.PARAMS), which the key rule and the handler
    both read, and answers 400 to a parameter the route reads given more than once, before
    anything else looks at the request. The hot lane hands such a request to ASGI, so this
    one answer serves both paths."""

    def __init__(self, app: ASGIApp, routes: RouteTable) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            values = parse_query(scope.get("query_string", b""))
            path = route_path(scope["path"], scope.get("root_path", ""))
            reads = self.routes.reads(scope["method"], path)
            name = repeated(values, reads)
            if name:
                await text_error(400, given_twice(name))(scope, receive, send)
                return
            scope[PARAMS] = Query(values, reads, path)
        await self.app(scope, receive, send)


class BearerAuth:
    """Pure ASGI middleware: who may make each call is the route table's (routing.Access):
    `Authorization: Bearer <key>` on every call but the open ones (the health check, the
    agent calls); a wrong key is refused as guesses.Credentials says (401, counted against
    the client's address; 429 past the limit). The web UI's pages take a live session's
    cookie instead (ui_session.py), and send a browser without one to the login form; a
    session is its key's, and its role is held to the route's as a bearer's is. It reads
    the parameters the door (ParamsDoor) parsed."""

    def __init__(self, app: ASGIApp, credentials: Credentials, routes: RouteTable) -> None:
        self.app = app
        self.routes = routes
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query: Query = scope[PARAMS]
        access, role = self.routes.door(scope["method"], query.path, query.values)
        if access is Access.UI:
            await self._ui(scope, receive, send, role)
            return
        let_in = self.credentials.door(access, role, scope["headers"])
        if let_in is UNAUTHORIZED:
            client = scope.get("client")
            let_in = await self.credentials.door_again(
                scope["app"].state.store,
                client[0] if client else None,
                access,
                role,
                scope["headers"],
            )
        if isinstance(let_in, Principal):
            if access is Access.KEY:  # elsewhere the handler decides who calls (AgentAuth)
                scope[CALLER] = let_in
            await self.app(scope, receive, send)
        else:  # door_again's: a role's 403, or a wrong key's counted 401 (429 past the limit)
            await text_error(*let_in)(scope, receive, send)

    async def _ui(self, scope: Scope, receive: Receive, send: Send, role: Role) -> None:
        """A UI page: let in as the session's principal (CALLER) when its role allows
        `role`; a 403 page when it does not (changing nothing); the login form without a
        live session, or for a named key's session once the keyring no longer holds the key
        as it was (revoked, or made again with another role): that session is ended."""
        session_id = cookie_session(scope["headers"])
        store, keyring = scope["app"].state.store, self.credentials.keyring
        try:
            who = await session_of(store, session_id)
            if who is not None and who != ADMIN and not keyring.holds(who):
                # A key this process may not know yet (made a moment ago through another
                # replica, or the process just started): the keys are read again first.
                await keyring.refresh(store)
                if not keyring.holds(who):
                    await end_session(store, session_id)
                    who = None
        except RedisError:
            await text_error(503, "store unavailable")(scope, receive, send)
            return
        if who is None:
            await RedirectResponse("/ui/login", status_code=303)(scope, receive, send)
            return
        scope[CALLER] = who  # the 403 page, too, says who is logged in
        if who.allows(role):
            await self.app(scope, receive, send)
        else:
            await text_error(*forbidden(who, role))(scope, receive, send)

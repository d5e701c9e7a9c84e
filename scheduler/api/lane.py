"""The hot lane: GET /jobs/{id}, the agent's poll, POST /jobs and PATCH /jobs/{id} answered
from `scheduler serve`'s HTTP protocol (server.LaneProtocol) without going through ASGI.

Why: uvicorn's per-request ASGI cycle (scope, event, task, messages) and Starlette's routing,
middleware and Request/Response objects were most of the ~80-110 µs of API CPU a GET
/jobs/{id} cost on this 2-core machine; served here it costs ~35-45 µs, about half of it the
socket writes, and reads and submits run 1.5-2x faster (docs/PERFORMANCE.md, The hot lane).
A read and a poll, one Redis command each, are answered in the reply's callback, with no
task (Route.send); a submit and a report, which read a body and may call Redis twice, in a
task each.

It answers exactly as the Starlette app does: a request's route is the one Starlette's router
would pick (the table's matcher, routing.RouteTable.serving, with the router's own compiled
routes), the logic is hot.py's, the error replies errors.py's, the key rule the very function
BearerAuth asks (guesses.Credentials.refuses), the agent networks' AgentNetworksGate's, the
request counts go to the same RequestStats.
Whatever the lane does not take (another route or method, HEAD, `wait=`, a query it does not
expect, a chunked or larger body, `Expect: 100-continue`) goes through ASGI as before, and
tests/api/test_lane.py and test_lane_hostile.py send the same requests both ways and compare
the answers byte for byte.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from redis.exceptions import NoScriptError
from starlette.convertors import CONVERTOR_TYPES

from scheduler.api import hot
from scheduler.api.agent_networks import FORBIDDEN, AgentNetworks
from scheduler.api.boundary import Boundary
from scheduler.api.errors import is_expected, reply_for
from scheduler.api.guesses import UNAUTHORIZED, Credentials, Refusal
from scheduler.api.http import length_of, refuse_declared
from scheduler.api.metrics import RequestStats
from scheduler.api.params import Params
from scheduler.api.routes import TABLE
from scheduler.api.routing import POLL_LABEL, Access, Entry, Hot, Method, RouteTable
from scheduler.api.state import AppState
from scheduler.models import poll
from scheduler.models.access_key import ANYONE, Principal, Role
from scheduler.models.record import record
from scheduler.store import ops
from scheduler.store.connection.protocol import Reply
from scheduler.store.errors import PartsApart, Unauthorized
from scheduler.store.scripts.jobs import Polled, Poller

# Starlette's `str` convertor (`{name}`): one non-empty segment, the matched text as it is.
TEXT_PARAM = CONVERTOR_TYPES["str"]
JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"
NOSNIFF = (b"x-content-type-options", b"nosniff")
# A JSON answer's headers, as http.json_bytes writes them: a job carries env_vars and output.
JOB_HEADERS = [(b"cache-control", b"no-store")]
# Requests with a declared body of at most this take the lane (uvicorn buffers as much for an
# ASGI app before pausing the socket); larger or unsized ones take the ASGI path, whose flow
# control pauses the socket while the app does not read.
MAX_BODY = 64 * 1024

Headers = list[tuple[bytes, bytes]]
# status, body, content type, headers written before content-length (as Starlette orders them)
Answer = tuple[int, bytes, bytes, Headers]


async def _no_body(limit: int, charge: hot.Charge) -> bytes:
    return b""


@dataclass(slots=True)
class HotRequest:
    method: str
    path: str
    headers: Headers
    params: Params = field(default_factory=dict)
    label: str = ""  # its route's metrics label
    id: str = ""  # the path's parameter (the job id), for a route that has one
    peer: str | None = None  # the socket's peer address (None on a Unix socket)
    # The body as http.read_body reads it: 413 past `limit`, each part's size told to
    # `charge` as it arrives, ClientDisconnect if the client leaves first. The protocol sets
    # it; the call decides when to read, as an ASGI app does.
    read_body: hot.BodyReader = _no_body
    started: float = field(default_factory=perf_counter)  # its duration counts from here
    # Who the door let in (`Lane.refused`), or the refusal it made of a right key whose role
    # is too low (403, not counted as a wrong credential).
    caller: Principal = ANYONE
    forbidden: Refusal | None = None

    def header(self, name: bytes) -> str:
        """The first `name` header's value, "" without one (as Starlette's headers.get)."""
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return ""

    def param(self, name: str) -> str:
        """A query parameter's value, "" without one (params.Query.get, inlined: the poll
        reads its node id here; the lane takes no query with a repeated name)."""
        values = self.params.get(name)
        return values[0] if values else ""


Handler = Callable[[HotRequest], Awaitable[Answer]]
# A call sent to Redis without a task: its reply, and how the reply becomes the answer.
Sent = tuple[Reply, Callable[[Any], Answer]]


@dataclass(frozen=True, slots=True)
class Route:
    """A method of a route table entry that the lane serves, and the call serving it."""

    method: str
    hot: Hot  # the call
    takes: Callable[[bytes], Params | None]  # hot.takes: which requests of the route it takes
    label: str
    # The table's access rule: KEY (Credentials.refuses, as BearerAuth asks) or AGENT: the
    # poll (Access.POLL, of which the lane takes only polls) and a report are agent calls,
    # which AGENT_NETWORKS narrows instead (AgentNetworksGate).
    access: Access
    role: Role  # the least role of a named key it takes (Method.role)
    param: str  # the template's parameter ("" for none): the request's `id`
    handler: Handler
    has_body: bool
    # For a call that is one Redis command: sends it and says how its reply is answered, so
    # the protocol answers in the reply's callback, with no task or coroutine (a task and
    # its chain of awaits cost a few µs of the ~40 a GET costs the API). None whenever the
    # handler should answer instead (no open Redis connection, or a refusal or error).
    send: Callable[[HotRequest], Sent | None] | None = None


def raw_headers(headers: dict[str, str]) -> Headers:
    """Headers as Starlette's Response writes them: names lowercased, latin-1."""
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def text_answer(status: int, message: str, headers: dict[str, str]) -> Answer:
    """http.text_error's answer."""
    return status, (message + "\n").encode(), TEXT, [NOSNIFF, *raw_headers(headers)]


OUTSIDE_AGENT_NETWORKS: Refusal = (403, FORBIDDEN, {})


class Lane:
    def __init__(
        self,
        state: AppState,
        credentials: Credentials,
        stats: RequestStats | None,
        routes: RouteTable = TABLE,
        networks: AgentNetworks | None = None,
        boundary: Boundary | None = None,
    ) -> None:
        self.state = state
        # The ASGI path's BrowserBoundary, asked first as there (boundary.py).
        self.boundary = boundary or Boundary("")
        self.credentials = credentials  # the key rule's (guesses.py), as BearerAuth's
        self.networks = networks  # AGENT_NETWORKS; None: agent calls from anywhere
        self.stats = stats
        self.served = 0  # requests answered here (the tests check the lane was taken)
        # Each call: its handler, whether it reads a body, how it sends its one Redis command.
        calls: dict[Hot, tuple[Handler, bool, Callable[[HotRequest], Sent | None] | None]] = {
            Hot.READ: (self.read_job, False, self.send_get),
            Hot.POLL: (self.poll_node, False, self.send_poll),
            Hot.SUBMIT: (self.create_job, True, None),
            Hot.REPORT: (self.report_job, True, None),
        }
        # The lane's call of each hot method of the table, by the identity of the table's
        # Method (which RouteTable.serving returns), and the methods it serves: a request of
        # another method (HEAD too) is ASGI's without being resolved.
        self.routes = routes
        self.by_method: dict[int, Route] = {}
        self.methods: dict[bytes, str] = {}
        for method, entry, found, hot_call in routes.hot():
            label, access, param = _served_as(method, entry, found)
            route = Route(
                method, hot_call, hot_call.takes, label, access, found.role, param, *calls[hot_call]
            )
            self.by_method[id(found)] = route
            self.methods[method.encode()] = method

    def route(self, method: bytes, path: str, query: bytes) -> tuple[Route, HotRequest] | None:
        """The lane's route for a request line, or None: ASGI serves it. The request's entry
        is the one the app's router finds, found with its routes (RouteTable.serving)."""
        name = self.methods.get(method)
        if name is None:
            return None
        resolved = self.routes.serving(name, path)
        if resolved is None:
            return None
        route = self.by_method.get(id(resolved[1]))
        if route is None or route.method != name:
            return None
        params = route.takes(query)
        if params is None:
            return None
        segment = resolved[2][route.param] if route.param else ""
        return route, HotRequest(name, path, [], params, route.label, segment)

    async def answer(self, route: Route, request: HotRequest) -> Answer:
        """The route's answer; an exception nothing expects (a bug) is raised to the caller."""
        try:
            if self.refused(route, request):
                answer = await self.refusal(route, request)
            else:
                answer = await route.handler(request)
        except Unauthorized:
            answer = await self.unauthorized(request)
        except Exception as exc:
            answer = self.failed(request, exc)
        self.observe(request, answer[0])
        return answer

    def send(self, route: Route, request: HotRequest) -> Sent | None:
        """The call sent to Redis (route.send), or None: `answer` serves the request. An
        exception nothing expects (a bug) is raised to the caller, counted as a 500."""
        if route.send is None or self.refused(route, request):
            return None
        try:
            return route.send(request)
        except Exception as exc:
            if not is_expected(exc):
                self.observe(request, 500)
                raise
            # A refusal (bad id, no token): the handler raises it again and answers it, as
            # every error of the route, in one place.
            return None

    def settled(self, request: HotRequest, reply: Reply, finish: Callable[[Any], Answer]) -> Answer:
        """The answer of a call `send` sent, from its reply. NoScriptError (Redis forgot the
        script), PartsApart (a job's parts need a second read), Unauthorized (a wrong
        credential, counted in a task: `answer`) and bugs are raised: the caller runs the
        handler, or answers 500."""
        try:
            answer = finish(reply.result())
        except (NoScriptError, PartsApart, Unauthorized):
            raise
        except Exception as exc:
            answer = self.failed(request, exc)
        self.observe(request, answer[0])
        return answer

    def refused(self, route: Route, request: HotRequest) -> bool:
        """Whether the door refuses the call, before any Redis work or body read: the
        browser boundary's rule first (BrowserBoundary's), then BearerAuth's where the key is
        needed (anything but the right key), AgentNetworksGate's for an agent call (from
        outside AGENT_NETWORKS). The right key is never refused, whatever its address."""
        if self.boundary.refusal(request.method, request.path, request.headers) is not None:
            return True
        if route.access is Access.AGENT:
            networks = self.networks
            return networks is not None and not networks.allows(request.peer, request.headers)
        let_in = self.credentials.door(route.access, route.role, request.headers)
        if isinstance(let_in, Principal):
            request.caller = let_in
            return False
        if let_in is not UNAUTHORIZED:
            request.forbidden = let_in
        return True

    async def refusal(self, route: Route, request: HotRequest) -> Answer:
        """A refused call's answer: the browser boundary's; else as AgentNetworksGate's (403
        outside AGENT_NETWORKS) or BearerAuth's: a right key's role too low (403), a named
        key this process did not know yet (the keys read again: served), a wrong credential
        (401, counted: 429 past the limit)."""
        stopped = self.boundary.refusal(request.method, request.path, request.headers)
        if stopped is not None:
            return text_answer(*stopped, {})
        if request.forbidden is not None:
            return text_answer(*request.forbidden)
        if route.access is Access.AGENT:
            return await self.unauthorized(request, OUTSIDE_AGENT_NETWORKS)
        let_in = await self.credentials.door_again(
            self.state.store, request.peer, route.access, route.role, request.headers
        )
        if isinstance(let_in, Principal):
            request.caller = let_in
            return await route.handler(request)
        return text_answer(*let_in)  # a role's 403, or a wrong key's counted 401 (or 429)

    async def unauthorized(self, request: HotRequest, refusal: Refusal = UNAUTHORIZED) -> Answer:
        """A wrong credential's answer (guesses.py): `refusal`, counted; 429 past the limit."""
        refused = await self.credentials.refused(
            self.state.store, request.peer, request.headers, refusal
        )
        return text_answer(*refused)

    def failed(self, request: HotRequest, exc: Exception) -> Answer:
        """errors.py's answer to `exc`; raised again when it has none (a bug)."""
        reply = reply_for(exc, f"{request.method} {request.path}")
        if reply is None:
            self.observe(request, 500)
            raise exc
        return text_answer(*reply)

    def observe(self, request: HotRequest, status: int) -> None:
        if self.stats is not None:
            seconds = perf_counter() - request.started
            self.stats.observe(request.method, request.label, status, seconds)

    def send_get(self, request: HotRequest) -> Sent | None:
        caller = request.caller
        if not caller.sees_secrets or caller.namespaces:
            # read_job hides its env_vars' values, or answers another namespace's job as none
            return None
        reply = self.state.store.send_get(hot.job_id_or_404(request.id))
        return None if reply is None else (reply, _job_answer)

    async def read_job(self, request: HotRequest) -> Answer:
        job = await hot.read_job(self.state.store, request.id, request.caller)
        return 200, job + b"\n", JSON, JOB_HEADERS

    def send_poll(self, request: HotRequest) -> Sent | None:
        sent = self.state.store.send_poll(self._poller(request))
        if sent is None:
            return None
        reply, parse = sent
        cap = self.state.settings.max_jobs_per_node
        return reply, lambda raw: _polled_answer(parse(raw), cap)

    async def poll_node(self, request: HotRequest) -> Answer:
        polled = await self.state.store.run(ops.jobs.poll(self._poller(request)))
        return _polled_answer(polled, self.state.settings.max_jobs_per_node)

    def _poller(self, request: HotRequest) -> Poller:
        hot.check_node_id(request.param("node_id"))  # a 400 before the key's 401, as ASGI
        caller = self.state.agent_auth.caller_of(request.header(b"authorization"))
        capacity, claims = request.param(poll.CAPACITY), request.param(poll.CLAIMS)
        return hot.poller(request.param("node_id"), caller, capacity, claims)

    async def create_job(self, request: HotRequest) -> Answer:
        key = request.header(b"idempotency-key")
        created = await hot.create_job(self.state, _reader(request), key, request.caller)
        return 200 if created.duplicate else 201, created.job + b"\n", JSON, JOB_HEADERS

    async def report_job(self, request: HotRequest) -> Answer:
        job_id = hot.job_id_or_404(request.id)
        caller = self.state.agent_auth.caller_of(request.header(b"authorization"))
        report = (job_id, caller, length_of(request.header(b"content-length")))
        blob = await hot.report_job(self.state, report, _reader(request))
        return 200, blob + b"\n", JSON, JOB_HEADERS


def _served_as(method: str, entry: Entry, found: Method) -> tuple[str, Access, str]:
    """(label, access, parameter) of a hot method of the table as the lane serves it, or
    ValueError when the lane cannot serve it as the app does."""
    hot_call = found.hot
    # The lane asks for the key or nothing: what it takes of a POLL route is polls.
    if found.access not in (Access.KEY, Access.AGENT) and not (
        found.access is Access.POLL and hot_call is Hot.POLL
    ):
        raise ValueError(f"the lane cannot serve {method} {entry.path}: {found.access}")
    # A call that takes any query must read none: the lane does not look for a repeated one
    # (the door's 400, params.py).
    if hot_call is Hot.SUBMIT and found.reads:
        raise ValueError(f"the lane's {method} {entry.path} reads no parameter")
    # The path's parameter reaches the call as Starlette gives it to the endpoint: the
    # string the route's regex matched (its `str` convertor).
    params = list(entry.route.param_convertors.items())
    if len(params) > 1 or any(convertor is not TEXT_PARAM for _, convertor in params):
        raise ValueError(f"the lane serves at most one str parameter: {entry.path}")
    access = Access.KEY if found.access is Access.KEY else Access.AGENT
    # What the lane takes of a POLL route is polls (without `wait`): their label.
    label = POLL_LABEL if hot_call is Hot.POLL else entry.label
    return label, access, params[0][0] if params else ""


def _job_answer(parts: list[bytes | None]) -> Answer:
    return 200, hot.job_reply(record(parts)) + b"\n", JSON, JOB_HEADERS


@functools.cache
def _poll_headers(cap: int) -> Headers:
    """A poll's headers without cancels, encoded once per setting, not on every poll."""
    return raw_headers(hot.poll_headers(cap))


def _polled_answer(polled: Polled, cap: int) -> Answer:
    # Most polls find nothing (a node at capacity, or without work) and carry no cancel.
    if not polled.cancels:
        body = b"[" + b",".join(polled.jobs) + b"]\n" if polled.jobs else b"[]\n"
        return 200, body, JSON, _poll_headers(cap)
    body, headers = hot.polled_reply(polled, cap)
    return 200, body + b"\n", JSON, raw_headers(headers)


def _reader(request: HotRequest) -> hot.BodyReader:
    """The body as http.read_body gives it: 413 at once for a declared size over the limit,
    408 when it is not whole within BODY_READ_SECS (server.LaneCycle.read_body)."""

    async def read(limit: int, charge: hot.Charge) -> bytes:
        refuse_declared(length_of(request.header(b"content-length")), limit)
        return await request.read_body(limit, charge)

    return read

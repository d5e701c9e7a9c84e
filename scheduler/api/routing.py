"""What a route table entry says, and how a request finds its entry.

An entry is a path template (Starlette's), the methods it serves with their endpoints, who may
call each (`Access`), when it is served, and which call of the hot lane serves it (`Hot`).
The table itself is routes.TABLE. Each entry compiles, once, into Starlette's own `Route`
(`Entry.route`), and that one object is the matcher of its path everywhere: the app's
router holds it (`RouteTable.starlette_routes`), and a request finds its entry by its regex as
the router would (`RouteTable.resolve`: the first entry whose route matches the path and
serves the method, else the first whose route matches the path (405), else none (404)) for
the key rule (http.BearerAuth, `RouteTable.access`), the metrics labels (`RouteTable.label`,
derived from the route's template) and the hot lane (lane.Lane). No other code matches a
path (tests/api/test_routes.py fails when some does). Each method declares the query
parameters it reads (`Method.reads`): one value each, so the door (http.ParamsDoor) refuses
one given twice (params.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from scheduler.api.described import Answer, Body
from scheduler.api.params import Params, parse_query
from scheduler.models.access_key import Role

Endpoint = Callable[[Request], Awaitable[Response]]
# When an entry is served: always; with the built-in registry (REGISTRY_URL unset); with
# METRICS=on. The key rule and the labels read every entry, served or not, so neither
# changes with the configuration (a registry route is open and 404s with REGISTRY_URL set).
Served = Literal["always", "registry", "metrics"]
UI_PREFIX = "/ui"  # the web UI's pages: one label, and behind the login cookie
OTHER_LABEL = "other"  # the label of a path no entry matches


class Access(Enum):
    """Who may make a call when TINYAWS_API_KEY is set (docs/SECURITY.md). Without a key
    nothing is asked at the door (BearerAuth is not installed)."""

    ANYONE = "anyone"
    # Open at the door: the handler decides by AGENT_AUTH (agents.AgentAuth): anyone in open
    # mode (the original Rust agent sends no key), a node token or the key in token mode.
    AGENT = "agent"
    # GET /jobs: AGENT as the agent's poll (`node_id=N&status=pending`), else KEY: a listing
    # exposes env_vars and output.
    POLL = "poll"
    # GET /services: AGENT as an agent's own list (`node_id=N`, any status), else KEY.
    OWN_SERVICES = "own services"
    KEY = "key"
    # The web UI's login cookie (a live session's id, api/ui_session.py); a browser
    # without one is sent to the login form.
    UI = "ui"


class Hot(Enum):
    """The hot lane's call (lane.Lane) serving an entry's method, and which of its requests
    it takes (`takes`); the others go through ASGI."""

    READ = "read"  # no query: `wait=` and `status_not=` (long-polls) are ASGI's
    POLL = "poll"  # the poll only (Access.POLL's), without `wait`
    SUBMIT = "submit"  # any query (the call reads none)
    REPORT = "report"  # no query

    @property
    def takes(self) -> Callable[[bytes], Params | None]:
        """query -> the request's parameters when the lane takes it with that query, else
        None. A plain function, looked up once per route: it runs on every lane request."""
        return _TAKES[self]


def _no_query(query: bytes) -> Params | None:
    return None if query else {}


def _any_query(query: bytes) -> Params | None:
    return {}


def _poll_without_wait(query: bytes) -> Params | None:
    params = parse_query(query)
    # A name given twice goes through ASGI, whose door refuses it when the route reads it
    # (400) and answers as here when not: one place decides, and counting is cheaper here
    # than asking which names the route reads.
    if sum(map(len, params.values())) != len(params):
        return None
    return params if is_poll(params) and "wait" not in params else None


_TAKES = {
    Hot.READ: _no_query,
    Hot.POLL: _poll_without_wait,
    Hot.SUBMIT: _any_query,
    Hot.REPORT: _no_query,
}


@dataclass(frozen=True, slots=True)
class Method:
    endpoint: Endpoint
    access: Access = Access.KEY
    hot: Hot | None = None  # None: through ASGI only
    # The query parameters the endpoint reads, one value each (params.Query.get refuses any
    # other name): one given twice is a 400 at the door, on every path to the endpoint.
    reads: Collection[str] = ()
    # The least role a named key (models/access_key.py) needs to make the call, or a UI
    # session to use it; the admin key (TINYAWS_API_KEY) makes every call. Declared on each
    # method: the table of roles x routes (docs/SECURITY.md) is this column.
    role: Role = field(kw_only=True)
    # What it is, takes and answers, for its OpenAPI description (openapi.py, described.py):
    # a line saying what it does, its body, and its answers by status (errors, as plain text
    # or a UI page, are described for every method: openapi.py).
    summary: str = field(default="", kw_only=True)
    body: Body | None = field(default=None, kw_only=True)
    answers: Mapping[int, Answer | tuple[Answer, ...]] = field(default_factory=dict, kw_only=True)
    # An AGENT call its handler refuses to anyone but the key or the node's own token even
    # with AGENT_AUTH=open (a node removed or drained: nodes.py `operator_or_node`), for the
    # description; the door (Access) is the same.
    anyone_in_open_mode: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", frozenset(self.reads))

    @property
    def operators(self) -> bool:
        """An agent call the operator makes too (DELETE /nodes/{id}, the drains): a named key
        of its role does (agents.AgentAuth.operator_or_node), from anywhere (AGENT_NETWORKS)."""
        return self.access is Access.AGENT and not self.anyone_in_open_mode


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    methods: Mapping[str, Method]
    served: Served = "always"
    # Who may send a method the entry does not serve (a 405): the key, so a stranger does not
    # learn the Allow list; a UI page's own access, as every path of the UI.
    other_methods: Access = Access.KEY
    label: str = field(init=False)
    # Starlette's route of the entry, compiled once: the app's router matches with this very
    # object, and so do the door, the labels and the lane (RouteTable.resolve).
    route: Route = field(init=False)

    def __post_init__(self) -> None:
        compiled = route(self.path, **{name: m.endpoint for name, m in self.methods.items()})
        ui = self.path == UI_PREFIX or self.path.startswith(UI_PREFIX + "/")
        ids = dict.fromkeys(compiled.param_convertors, "{id}")
        object.__setattr__(self, "label", UI_PREFIX if ui else compiled.path_format.format(**ids))
        object.__setattr__(self, "route", compiled)

    def method(self, method: str) -> Method | None:
        """The method's entry when Starlette's route serves it (HEAD is GET's, as the route's
        dispatch answers it), else None."""
        if method not in (self.route.methods or ()):
            return None
        return self.methods.get("GET" if method == "HEAD" else method)


def route(path: str, **by_method: Endpoint) -> Route:
    """One Starlette route per path, so a wrong method gets a 405 whose Allow header lists
    them all."""

    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await by_method[method](request)

    return Route(path, dispatch, methods=list(by_method))


# A request's entry (Starlette's Match.FULL: the entry, the method's, the path's match) or
# its path's only (Match.PARTIAL, a 405: the entry, None, the match).
Resolved = tuple[Entry, Method | None, re.Match[str]]
# The routes a path may match, in the table's order, each with the Method it serves (for
# `serving`, by method) or None (for `matching`, whatever the method).
Tried = tuple[tuple[Callable[[str], re.Match[str] | None], Entry, Method | None], ...]


class RouteTable:
    """The entries in Starlette's order, matched by Starlette's compiled routes (each entry's
    `route`). An index narrows which are tried: by the path's first character when the
    template names it (a route matches only paths with that character there), and for a
    method the routes that serve it. It decides nothing: the routes' own regexes and method
    sets do, in the router's order."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries = tuple(entries)
        firsts = {_first_char(e.path) for e in self.entries}
        # A method (None: any) -> its routes by the first character of a path, for those some
        # template names, and for any other.
        methods = {None, *(name for e in self.entries for name in e.route.methods or ())}
        self._by_first = {
            method: {first: self._tried(method, first) for first in firsts if first is not None}
            for method in methods
        }
        self._anywhere = {method: self._tried(method, None) for method in methods}
        # `serving`'s answers for the paths that are a template without parameters (`/jobs`:
        # the poll's and the submit's), worked out once by the same routes: a memo of the
        # matcher, not a rule of its own, so the calls most made skip the regexes.
        self._plain = {
            e.path: {method: self._serve(method, e.path) for method in methods if method}
            for e in self.entries
            if not e.route.param_convertors
        }

    def _tried(self, method: str | None, first: str | None) -> Tried:
        """The routes serving `method` (None: any) that a path of first character `first`
        may match (None: one no template names), in the table's order."""
        tried = []
        for entry in self.entries:
            found = None if method is None else entry.method(method)
            if _first_char(entry.path) in (first, None) and (method is None or found):
                tried.append((entry.route.path_regex.match, entry, found))
        return tuple(tried)

    def starlette_routes(self, registry: bool, metrics: bool) -> list[Route]:
        served = {"always": True, "registry": registry, "metrics": metrics}
        return [entry.route for entry in self.entries if served[entry.served]]

    def serving(self, method: str, path: str) -> Resolved | None:
        """Starlette's Match.FULL: the first entry whose route matches the path and serves the
        method (the router takes the first such), its Method and the path's match; None when
        none does (a 404 or a 405)."""
        plain = self._plain.get(path)
        return self._serve(method, path) if plain is None else plain.get(method)

    def _serve(self, method: str, path: str) -> Resolved | None:
        by_first = self._by_first.get(method)  # _routes, inlined: the lane asks on every request
        if by_first is None:
            return None
        tried = by_first.get(path[1:2])
        for match, entry, found in self._anywhere[method] if tried is None else tried:
            matched = match(path)
            if matched is not None:
                return entry, found, matched
        return None

    def matching(self, path: str) -> list[Entry]:
        """The entries whose route matches `path`, whatever the method, in the table's order."""
        return [entry for match, entry, _ in self._routes(None, path) if match(path) is not None]

    def resolve(self, method: str, path: str) -> Resolved | None:
        """As Starlette's router: the first entry whose route matches path and method (its
        Method), else the first whose route matches the path (None: a 405); None: no entry
        matches (404)."""
        served = self.serving(method, path)
        if served is not None:
            return served
        for match, entry, _ in self._routes(None, path):
            matched = match(path)
            if matched is not None:
                return entry, None, matched
        return None

    def _routes(self, method: str | None, path: str) -> Tried:
        """The routes `serving` or `matching` tries for `path`, by the index."""
        tried = self._by_first[method].get(path[1:2])
        return self._anywhere[method] if tried is None else tried

    def reads(self, method: str, path: str) -> Collection[str]:
        """The query parameters the call's endpoint reads (none for a 404 or a 405)."""
        resolved = self.resolve(method, path)
        return resolved[1].reads if resolved is not None and resolved[1] is not None else ()

    def access(self, method: str, path: str, params: Params) -> Access:
        """Who may make this call: ANYONE, AGENT, KEY or UI (`door`'s first half)."""
        return self.door(method, path, params)[0]

    def door(self, method: str, path: str, params: Params) -> tuple[Access, Role]:
        """Who may make this call, and the least role it needs (Method.role): ANYONE, AGENT,
        KEY or UI (POLL and OWN_SERVICES are decided here by the request's parameters,
        params.parse_query's). A path no entry matches needs the key, or under the UI's
        prefix the UI's cookie (the login form for a browser); it, and a method the path
        does not serve (405), need any key's role: their answers tell nothing."""
        resolved = self.resolve(method, path)
        if resolved is None:
            return (Access.UI if path.startswith(UI_PREFIX + "/") else Access.KEY), Role.READER
        entry, found, _ = resolved
        if found is None:
            return entry.other_methods, Role.READER
        access = found.access
        if access is Access.POLL or access is Access.OWN_SERVICES:
            agents = is_poll(params) if access is Access.POLL else bool(first(params, "node_id"))
            access = Access.AGENT if agents else Access.KEY
        return access, found.role

    def is_open(self, method: str, path: str, params: Params) -> bool:
        """Whether the call needs nothing at the door (neither the key nor the UI's cookie)."""
        return self.access(method, path, params) in (Access.ANYONE, Access.AGENT)

    def label(self, path: str) -> str:
        """The metrics label: the first matching entry's (its template with `{id}` for each
        parameter; one for the UI's pages), whatever the method: a fixed, small set whatever
        paths clients send."""
        candidates = self.matching(path)
        if candidates:
            return candidates[0].label
        return UI_PREFIX if path.startswith(UI_PREFIX + "/") else OTHER_LABEL

    def request_label(self, method: str, path: str, query: bytes) -> str:
        """The label of a request (`request_label`): the query read only for a GET."""
        label = self.label(path)
        if method not in ("GET", "HEAD") or not query:
            return label
        return request_label(method, label, parse_query(query))

    def hot(self) -> Iterable[tuple[str, Entry, Method, Hot]]:
        """(method, entry, its Method, the lane's call) of what the hot lane serves."""
        for entry in self.entries:
            for name, found in entry.methods.items():
                if found.hot is not None:
                    yield name, entry, found, found.hot


def route_path(path: str, root_path: str) -> str:
    """The path a route matches, as Starlette's router reads a scope: ASGI's `path` includes
    the `root_path` (uvicorn's --root-path), which a mounted app's routes do not name."""
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path) :] if path[len(root_path)] == "/" else path


def _first_char(template: str) -> str | None:
    """The character after a template's leading "/" when it is plain text, which its route's
    regex (Starlette's, anchored at the start) matches as it is; None: a parameter, or
    nothing (the route of "/" also matches "/\n": its `$` allows a newline before the end)."""
    first = template[1:2]
    return None if first in ("{", "") else first


def first(params: Params, name: str) -> str:
    """The first value of a query parameter, "" without one, as Go's URL.Query().Get (the
    only one where the door let the request in: a repeated one it reads is a 400)."""
    values = params.get(name)
    return values[0] if values else ""


# A listing's paging parameters (and `schedule` and `namespace`, a listing's only). Neither
# agent sends one with its poll (CONTRACT 3.3, agent/remote.py), so one of them, given a
# value, makes `GET /jobs?node_id=X&status=pending` the operator's listing of X's queue (the
# key's; `scheduler list` always sends `limit`): without, the poll hands out only X's free
# capacity, and a full node's queue listed as `[]`.
PAGING = ("limit", "order", "after", "before", "schedule", "namespace")


def is_poll(params: Params) -> bool:
    """The agent's poll: a GET /jobs for one node's pending jobs, without a paging parameter
    (else a listing)."""
    node_id, status = params.get("node_id"), params.get("status")  # first() inlined: hot
    if not (node_id and node_id[0] and status and status[0] == "pending"):
        return False
    return not any(params.get(name, ("",))[0] for name in PAGING)


def polls(node_id: str, status: str, paged: bool) -> bool:
    """is_poll from the first values of node_id and status, and whether a paging parameter
    has a value."""
    return bool(node_id) and status == "pending" and not paged


# The metrics labels of the calls that wait: the agent's poll, apart from the listings (the
# same route), and any long-poll (`wait=`) apart from its route's other calls, so a read's
# latency is not mixed with the agents' 20 s waits.
POLL_LABEL = "/jobs?poll"  # a long-poll's: /jobs?poll&wait, /jobs/{id}?wait


def request_label(method: str, label: str, params: Params) -> str:
    """A request's metrics label from its route's `label` and its parameters."""
    if method not in ("GET", "HEAD"):
        return label
    if label == "/jobs" and is_poll(params):
        label = POLL_LABEL
    if "wait" not in params:
        return label
    return label + ("&wait" if "?" in label else "?wait")

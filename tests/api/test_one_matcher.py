"""One route matcher and one key rule (issue 37): every path is matched by Starlette's own
compiled routes, which the app's router holds and the route table (routing.RouteTable) and the
hot lane (lane.Lane) ask; the key is compared by one function (guesses.Credentials) that both
fronts' doors call. A second matcher or a second comparison fails here."""

from __future__ import annotations

import ast
import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import RedisError
from starlette.routing import BaseRoute, Match

from scheduler.api.app import create_app
from scheduler.api.guesses import Credentials, Refusal
from scheduler.api.http import BearerAuth
from scheduler.api.lane import HotRequest, Lane
from scheduler.api.params import PARAMS, Query
from scheduler.api.routes import TABLE
from scheduler.api.routing import Access, Entry
from scheduler.config import Settings
from scheduler.models.access_key import Principal, Role

SCHEDULER = Path(__file__).resolve().parents[2] / "scheduler"
KEY = "k" * 32
METHODS = ["GET", "HEAD", "POST", "PATCH", "DELETE", "PUT", "OPTIONS"]
# Path parameters as clients send them, odd ones too: what the lane's protocol hands over
# is the raw path (a "%" one goes to ASGI before matching), Starlette's the decoded one; both
# reach the matcher as text.
ODD_IDS = [
    "job-1", "register", "retry", "a b", "ä", "a:b", "a;b", "a,b", "a=b", "a@b", "a+b",
    "~", ".", "..", "%41", "a%2Fb", "{job_id}", "a\n", "a\t", "",
]  # fmt: skip
SUFFIXES = ["", "/", "//", "/x", "/x/", "/attempts", "/retry", "/drain", "/x/y"]
PATHS = sorted(
    {template.partition("{")[0] + value + suffix
     for template in [e.path for e in TABLE.entries] + ["/", "/nope/"]
     for value in ODD_IDS
     for suffix in SUFFIXES}
    | {e.path for e in TABLE.entries}
    | {"", "/", "*", "jobs", "/jobs\n", "/JOBS", "/jobs/job-1?x"}
)  # fmt: skip
QUERIES = [b"", b"node_id=n1&status=pending"]


def every_route_app() -> Any:
    """The app with every entry served (the built-in registry, METRICS=on)."""
    return create_app(Settings.from_env({}, metrics="on", scheduler_db="/nonexistent/x.db"))


def starlette_match(routes: list[BaseRoute], method: str, path: str) -> tuple[str, Any, dict]:
    """What Starlette's router does with the request: ("full", its route, the path's
    parameters), else ("partial", the first route matching the path: a 405), else 404."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    partial: tuple[str, Any, dict] = ("404", None, {})
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            return "full", route, child["path_params"]
        if match is Match.PARTIAL and partial[1] is None:
            partial = ("partial", route, child["path_params"])
    return partial


def test_starlettes_routes_are_the_tables_own_objects() -> None:
    """One compiled route per entry: the router matches with the very objects the table
    and the lane match with, not a copy built from the same template."""
    routes = every_route_app().router.routes
    assert len(routes) == len(TABLE.entries)
    assert all(route is entry.route for route, entry in zip(routes, TABLE.entries, strict=True))


def entry_of(route: Any) -> Entry:
    return next(entry for entry in TABLE.entries if entry.route is route)


def test_the_table_and_the_lane_match_every_request_as_starlettes_router() -> None:
    """For every method and path (odd parameters, trailing and doubled slashes, HEAD, a
    405 against a 404): the table resolves the router's route with the router's parameters,
    and the lane takes exactly the requests the router sends to a method the lane serves,
    with the router's parameter as the job id."""
    routes = every_route_app().router.routes
    lane = Lane(None, Credentials(KEY), None)  # type: ignore[arg-type]
    taken = set()
    for method, path in itertools.product(METHODS, PATHS):
        kind, route, path_params = starlette_match(routes, method, path)
        resolved = TABLE.resolve(method, path)
        if kind == "404":
            assert resolved is None, (method, path)
        else:
            assert resolved is not None and resolved[0].route is route, (method, path)
            assert (resolved[1] is not None) is (kind == "full"), (method, path)
            assert resolved[2].groupdict() == path_params, (method, path)
        for query in QUERIES:
            found = lane.route(method.encode(), path, query)
            # The method itself: a HEAD is GET's for Starlette, never the lane's.
            spec = entry_of(route).methods.get(method) if kind == "full" else None
            hot = spec.hot if spec is not None else None
            assert (found is not None) is (hot is not None and hot.takes(query) is not None), (
                method,
                path,
                query,
            )
            if found is not None:
                assert found[0].hot is hot
                assert found[1].id == "".join(path_params.values()), (method, path)
                taken.add((method, entry_of(route).path))
    assert taken == {
        ("GET", "/jobs"),
        ("POST", "/jobs"),
        ("GET", "/jobs/{job_id}"),
        ("PATCH", "/jobs/{job_id}"),
    }


def test_a_label_is_the_first_matching_routes_whatever_the_method() -> None:
    routes = every_route_app().router.routes
    for path in PATHS:
        kind, route, _ = starlette_match(routes, "TRACE", path)  # no entry serves TRACE
        expected = entry_of(route).label if route is not None else None
        assert kind != "full"
        assert TABLE.label(path) == (expected or ("/ui" if path.startswith("/ui/") else "other"))


# No second matcher: in the API, Starlette's route matching is reached from routing.py alone,
# and no module holds a path pattern of its own or splits a request's path into segments.
MATCHING_NAMES = {"path_regex", "compile_path", "matches", "Router", "Mount", "Match"}
PATH_PATTERN_BITS = ("[^/]", r"\{", "{\\w")
SPLITTERS = {"partition", "rpartition", "split", "rsplit"}


def second_matchers(source: str, name: str) -> list[str]:
    """Where the module `name` (its path under scheduler/) matches a request's path itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module == "starlette.routing":
            found.append(f"{where} imports starlette.routing")
        elif isinstance(node, ast.Attribute | ast.Name):
            used = node.attr if isinstance(node, ast.Attribute) else node.id
            if used in MATCHING_NAMES:
                found.append(f"{where} uses {used}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(bit in node.value for bit in PATH_PATTERN_BITS):
                found.append(f"{where} holds a path pattern {node.value!r}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SPLITTERS
            and any(isinstance(a, ast.Constant) and a.value == "/" for a in node.args)
        ):
            found.append(f"{where} splits a path on '/'")
    return found


def test_no_second_route_matcher() -> None:
    found = [
        place
        for path in sorted((SCHEDULER / "api").glob("*.py"))
        for place in second_matchers(path.read_text(), str(path.relative_to(SCHEDULER)))
        # routing.py: Starlette's routes and the table's index of them, the one matcher.
        if not (path.name == "routing.py" and "holds a path pattern" not in place)
    ]
    assert found == []


def test_the_check_finds_a_second_matcher() -> None:
    """The check above can fail: the table's own regex and the lane's dict that were here."""
    source = (
        "import re\n"
        "PATTERN = re.compile('/jobs/[^/]+')\n"
        "def route(path: str) -> str:\n"
        "    return path.rpartition('/')[0]\n"
    )
    assert len(second_matchers(source, "api/lane.py")) == 2
    assert len(second_matchers("from starlette.routing import compile_path", "api/x.py")) == 1


# One key rule, one comparison.


def test_the_key_is_compared_in_one_function() -> None:
    """Credentials._key (TINYAWS_API_KEY) is read by _is_key alone: the header's check,
    the login form's and an agent call's bearer all go through it."""
    tree = ast.parse((SCHEDULER / "api" / "guesses.py").read_text())
    readers = {
        function.name
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Attribute) and node.attr == "_key"
        and isinstance(node.ctx, ast.Load)
    }  # fmt: skip
    assert readers == {"_is_key"}
    # hmac's comparisons in the API: the door's credentials, and a UI form's CSRF token.
    comparing = {
        path.name for path in sorted((SCHEDULER / "api").glob("*.py"))
        if "compare_digest" in path.read_text()
    }  # fmt: skip
    assert comparing == {"guesses.py", "ui_forms.py"}


class _NoStore:
    async def run(self, call: Any) -> Any:
        raise RedisError("not counted in this test")


class _App:
    class state:  # as Starlette's app.state
        store = _NoStore()


@pytest.mark.parametrize(
    "authorization",
    [f"Bearer {KEY}", f"Bearer {KEY}x", f"bearer {KEY}", KEY, f"Bearer  {KEY}", "", "Bearer "],
)
def test_both_doors_ask_the_one_key_rule(
    monkeypatch: pytest.MonkeyPatch, authorization: str
) -> None:
    asked: list[tuple[str, bool]] = []
    rule = Credentials.door

    def spy(self: Credentials, access: Access, role: Role, headers: Any) -> Principal | Refusal:
        let_in = rule(self, access, role, headers)
        asked.append((access.value, not isinstance(let_in, Principal)))
        return let_in

    monkeypatch.setattr(Credentials, "door", spy)
    credentials = Credentials(KEY)
    headers = [(b"authorization", authorization.encode())] if authorization else []
    # The lane's door, for a GET /jobs/{id} (the key's).
    lane = Lane(None, credentials, None)  # type: ignore[arg-type]
    found = lane.route(b"GET", "/jobs/job-1", b"")
    assert found is not None
    lane_refused = lane.refused(found[0], HotRequest("GET", "/jobs/job-1", headers))
    # BearerAuth's, for the same request through ASGI.
    served: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append(True)

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/jobs/job-1",
        "headers": headers,
        "app": _App(),
        "client": ("127.0.0.1", 1),
        PARAMS: Query({}, (), "/jobs/job-1"),
    }
    asyncio.run(BearerAuth(app, credentials, TABLE)(scope, None, send))  # type: ignore[arg-type]
    assert asked == [("key", lane_refused), ("key", lane_refused)]
    assert lane_refused is not bool(served)
    assert lane_refused is (authorization != f"Bearer {KEY}")

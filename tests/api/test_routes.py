"""The route table (scheduler/api/routes.py): each entry is served by Starlette as the table
says, resolved as Starlette's router resolves it, asked for what its access rule says through
ASGI and through the hot lane, labelled as before, and each hot-lane route answers through
the lane as through ASGI, byte for byte."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest
from starlette.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.api.guesses import Credentials
from scheduler.api.http import UI_COOKIE
from scheduler.api.lane import Lane
from scheduler.api.params import parse_query
from scheduler.api.routes import TABLE
from scheduler.api.routing import Access, Entry, Hot, request_label
from tests.api.test_lane_hostile import KEY, KEYED, Front, converse, keyed_pair, raw
from tests.conftest import BOTH_FRONTS, ClientFactory, SettingsFactory

METHODS = ["GET", "HEAD", "POST", "PATCH", "DELETE", "PUT", "OPTIONS"]
TEMPLATES = [entry.path for entry in TABLE.entries]
# Paths around every template: its own, deeper, trailing slashes, dot segments, empty ids.
PATHS = sorted(
    {
        re.sub(r"\{\w+\}", value, template) + suffix
        for template in [*TEMPLATES, "", "/jobsx", "/uix", "/nope"]
        for value in ("x", "register", "")
        for suffix in ("", "/", "x", "/x", "/x/y", "//", "/..", "/.")
    }
)
QUERIES = [
    b"",
    b"node_id=n1&status=pending",
    b"status=pending&node_id=n1&limit=5",
    b"node_id=n1",
    b"node_id=n1&status=running",
    b"node_id=&node_id=n1&status=pending",
    b"node_id=n1&node_id=&status=pending",
    b"node_id=n1&status=&status=pending",
    b"node%5Fid=n1&status=pend%69ng",
    b"node_id=n1&status=pending&wait=5",
    b"status=pending",
]


# The rule and the labels as they were before the table (a frozen copy: the reference the
# table is checked against).


def rule_before(method: str, path: str, query: bytes) -> str:
    if path == "/ui" or path.startswith("/ui/"):
        return "open" if path == "/ui/login" else "ui"
    if path in ("/health", "/"):  # the root: a browser's landing, sent to /ui (a redirect)
        return "open" if method in ("GET", "HEAD") else "key"
    if re.fullmatch(r"/nodes/[^/]+/(drain|undrain)", path):
        # A node's drain (issue 24): open at the door, as DELETE /nodes/{id}; another method
        # (a 405) needs the key, as every entry's.
        return "open" if method == "POST" else "key"
    if re.fullmatch(r"/jobs/[^/]*/(retry|attempts|logs|place)", path):
        return "key"  # a job's retry, attempts (issue 23), output (39), place: the operator's
    if re.fullmatch(r"/jobs/[^/]+/output", path):
        # An agent's live output (issue 39): open at the door (its handler decides, as a
        # report's), another method (a 405) the key's, as every entry's.
        return "open" if method == "POST" else "key"
    if method == "PATCH":
        prefixes = ("/jobs/", "/services/")
        return "open" if any(path.startswith(p) and len(path) > len(p) for p in prefixes) else "key"
    if method == "DELETE" and path.startswith("/nodes/"):
        return "open"
    if method in ("GET", "HEAD") and path == "/instances":
        return "open"  # the agents' call before each poll (issue 36): open at the door
    if method == "POST":
        return "open" if path in ("/nodes/register", "/nodes/heartbeat", "/services") else "key"
    if method in ("GET", "HEAD") and path in ("/jobs", "/services"):
        params = parse_qs(query.decode("latin-1"), keep_blank_values=True)
        first = {name: values[0] for name, values in params.items()}
        # A paging parameter makes a node's pending jobs the operator's listing (issue 38).
        paged = any(first.get(name) for name in ("limit", "order", "after", "before"))
        agents = bool(first.get("node_id")) and (
            path == "/services" or (first.get("status") == "pending" and not paged)
        )
        return "open" if agents else "key"
    return "key"


def rule_now(method: str, path: str, query: bytes) -> str:
    access = TABLE.access(method, path, parse_query(query))
    return {Access.ANYONE: "open", Access.AGENT: "open", Access.UI: "ui"}.get(access, "key")


LABELS_BEFORE = {
    "/",
    "/jobs",
    "/jobs/{id}",
    "/nodes",
    "/nodes/register",
    "/nodes/heartbeat",
    "/nodes/{id}",
    "/services",
    "/services/{id}",
    "/instances",
    "/health",
    "/schedule",
    "/metrics",
    "/keys",
    "/audit",
    "/keys/{id}",
    "/namespaces",
    "/namespaces/{id}/quota",
    "/ui",
    "other",
    # Schedules (issue 23): the operator's, behind the key.
    "/schedules",
    "/schedules/{id}",
    "/schedules/{id}/pause",
    "/schedules/{id}/resume",
    # Retry by hand (issue 23): the operator's, behind the key.
    "/jobs/retry",
    # Bulk submit (issue 40): as POST /jobs, behind the key.
    "/jobs/batch",
    "/jobs/{id}/retry",
    # A job's attempts (issue 23): as GET /jobs/{id}, behind the key.
    "/jobs/{id}/attempts",
    # A pending job's place in its queue: as GET /jobs/{id}, behind the key.
    "/jobs/{id}/place",
    # Drains (issue 24): the key, or a node's own token for its own node.
    "/nodes/{id}/drain",
    "/nodes/{id}/undrain",
    # Live output and events (issue 39): an agent's chunks; the output and events, the key's.
    "/jobs/{id}/output",
    "/jobs/{id}/logs",
    "/events",
    # The API's description (issue 42): the key's, as the rest of the API.
    "/openapi.json",
}


def test_the_key_rule_is_unchanged_for_every_request_a_route_matches() -> None:
    """Where no route matches (a 404 whatever the credentials) the old prefix test let some
    PATCH and DELETE paths through the door (`PATCH /jobs/job-1/x`, `DELETE /nodes/`); the
    table asks for the key there: stricter, never more open."""
    stricter = []
    for method, path, query in itertools.product(METHODS, PATHS, QUERIES):
        before, now = rule_before(method, path, query), rule_now(method, path, query)
        if TABLE.resolve(method, path) is not None:
            assert now == before, (method, path, query)
        elif now != before:
            assert (before, now) == ("open", "key"), (method, path, query)
            stricter.append((method, path))
    assert stricter and {m for m, _ in stricter} == {"PATCH", "DELETE"}


def test_labels_are_the_set_they_were_and_each_routes_own() -> None:
    assert {entry.label for entry in TABLE.entries} | {"other"} == LABELS_BEFORE
    for path in PATHS:
        matching = TABLE.matching(path)
        label = TABLE.label(path)
        if matching:
            assert label == matching[0].label
        else:
            assert label == ("/ui" if path.startswith("/ui/") else "other"), path


@pytest.mark.parametrize(
    ("registry", "metrics"), [(True, True), (False, True), (True, False), (False, False)]
)
def test_starlettes_routes_are_the_tables_in_its_order(
    make_settings: SettingsFactory, registry: bool, metrics: bool
) -> None:
    registry_url = "" if registry else "http://registry.invalid"
    app = create_app(make_settings(registry_url=registry_url, metrics="on" if metrics else "off"))
    served = {"always": True, "registry": registry, "metrics": metrics}
    expected = [(e.path, set(e.methods)) for e in TABLE.entries if served[e.served]]
    routes = [(r.path, r.methods) for r in app.routes]  # type: ignore[attr-defined]
    assert [(path, methods - {"HEAD"}) for path, methods in routes] == expected
    assert app.router.redirect_slashes is False


# The table against Starlette's router, path by path: tests/api/test_one_matcher.py.


def test_the_lane_finds_what_the_table_says_the_lane_serves() -> None:
    lane = Lane(None, Credentials(KEY), None)  # type: ignore[arg-type]
    hot_routes = 0
    for method, path, query in itertools.product(METHODS, PATHS, QUERIES):
        resolved = TABLE.resolve(method, path)
        # The method itself (a HEAD is GET's for Starlette, never the lane's).
        spec = resolved[0].methods.get(method) if resolved and resolved[1] else None
        takes = spec is not None and spec.hot is not None and spec.hot.takes(query) is not None
        found = lane.route(method.encode(), path, query)
        assert (found is not None) is takes, (method, path, query)
        if found is not None:
            assert spec is not None and resolved is not None
            route, request = found
            label = request_label(method, resolved[0].label, parse_query(query))
            assert route.hot is spec.hot and request.label == label
            assert (route.access is Access.KEY) is (spec.access is Access.KEY)
            hot_routes += 1
    assert hot_routes


def test_the_lane_serves_the_four_hot_calls() -> None:
    served = {(method, entry.path, hot) for method, entry, _, hot in TABLE.hot()}
    assert served == {
        ("GET", "/jobs/{job_id}", Hot.READ),
        ("GET", "/jobs", Hot.POLL),
        ("POST", "/jobs", Hot.SUBMIT),
        ("PATCH", "/jobs/{job_id}", Hot.REPORT),
    }


# Every entry and method over HTTP, through ASGI and through the lane.

IDS = {
    "job_id": "job-1",
    "node_id": "n1",
    "service_id": "svc-1",
    "name": "s1",
    "action": "pause",
    "namespace": "team-a",
}
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/jobs"): {"command": "x"},
    ("PATCH", "/jobs/{job_id}"): {"status": "running"},
    ("POST", "/nodes/register"): {"id": "n1", "hostname": "n1", "role": "compute"},
    ("POST", "/nodes/heartbeat"): {"id": "n1"},
    ("POST", "/services"): {"node_id": "n1", "port": 1},
    ("PATCH", "/services/{service_id}"): {"status": "done"},
    ("POST", "/schedules"): {"name": "s1", "every_secs": 60, "job": {"command": "x"}},
}
# The calls answered by a stream that lasts without a query: the events (follow=0 ends them),
# and the job page's live output (while job-1 is unfinished).
FOLLOWED = {"/events", "/ui/jobs/job-1/logs"}
# (query, whether the agents' part of the rule applies) for the query-dependent rules.
QUERIES_OF = {
    Access.POLL: [("node_id=n1&status=pending", True), ("node_id=n1&status=running", False)],
    Access.OWN_SERVICES: [("node_id=n1", True), ("status=running", False)],
}


def calls() -> Iterator[tuple[str, str, Any, Access, Entry]]:
    """(method, target, JSON body, the access it must meet, its entry) for every entry and
    method of the table, HEAD beside every GET; the query-dependent ones both ways."""
    for entry in TABLE.entries:
        path = entry.path.format(**IDS)
        for method, found in [*entry.methods.items(), ("HEAD", entry.method("HEAD"))]:
            if found is None:
                continue
            body = BODIES.get((method, entry.path))
            if found.access in QUERIES_OF:
                for query, agents in QUERIES_OF[found.access]:
                    access = Access.AGENT if agents else Access.KEY
                    yield method, f"{path}?{query}", body, access, entry
            else:
                yield method, path, body, found.access, entry


CALLS = list(calls())


def refused(response: Any) -> str:
    """ "key" (a plain 401, as BearerAuth's), "ui" (the redirect to the login form that is
    not the logout's), or "" (answered)."""
    plain = response.headers.get("content-type", "").startswith("text/plain")
    if response.status_code == 401 and plain and response.content in (b"unauthorized\n", b""):
        return "key"
    if (
        response.status_code == 303
        and response.headers.get("location") == "/ui/login"
        and "set-cookie" not in response.headers
    ):
        return "ui"
    return ""


def logged_in(api: TestClient) -> str:
    """A UI session's id, from the login form (left out of the client's own cookies)."""
    answer = api.post("/ui/login", data={"key": KEY}, follow_redirects=False)
    api.cookies.clear()
    session: str = answer.cookies[UI_COOKIE]
    return session


@pytest.fixture
def keyed(make_client: ClientFactory) -> TestClient:
    """A key set, open agents: node n1, its pending job-1 and its service svc-1."""
    api = make_client(api_key=KEY, agent_auth="open")
    headers = {"Authorization": f"Bearer {KEY}"}
    assert api.post("/nodes/register", json={"id": "n1"}, headers=headers).status_code == 201
    assert api.post("/jobs", json={"command": "x"}, headers=headers).status_code == 201
    service = {"node_id": "n1", "port": 8080}
    assert api.post("/services", json=service, headers=headers).status_code == 201
    return api


@BOTH_FRONTS
@pytest.mark.parametrize(
    ("method", "target", "body", "access"),
    [call[:4] for call in CALLS],
    ids=[f"{c[0]} {c[1]}" for c in CALLS],
)
def test_every_entry_asks_at_the_door_what_the_table_says(
    keyed: TestClient, method: str, target: str, body: Any, access: Access
) -> None:
    stranger = keyed.request(method, target, json=body, follow_redirects=False)
    expected = {Access.KEY: "key", Access.UI: "ui"}.get(access, "")
    if (method, target) in (
        ("DELETE", "/nodes/n1"),
        ("POST", "/nodes/n1/drain"),
        ("POST", "/nodes/n1/undrain"),
    ):
        expected = "key"  # open at the door; its handler asks for the key in open mode
    assert refused(stranger) == expected, stranger.text
    # The key (and for the UI a session's cookie) gets past the door.
    cookie = {"Cookie": f"{UI_COOKIE}={logged_in(keyed)}"}
    credentials = {"Authorization": f"Bearer {KEY}", **cookie}
    if target in FOLLOWED:  # a stream that lasts: its head only
        with keyed.stream(method, target, headers=credentials) as streamed:
            assert refused(streamed) == "" and streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("text/event-stream")
        return
    answered = keyed.request(method, target, json=body, headers=credentials, follow_redirects=False)
    assert refused(answered) == "", answered.text
    assert answered.status_code < 500


@BOTH_FRONTS
@pytest.mark.parametrize(
    ("method", "target", "body"),
    [call[:3] for call in CALLS if call[3] is Access.AGENT],
    ids=[f"{c[0]} {c[1]}" for c in CALLS if c[3] is Access.AGENT],
)
def test_in_token_mode_every_agent_call_refuses_a_stranger(
    make_client: ClientFactory, method: str, target: str, body: Any
) -> None:
    """AGENT calls are open at the door; in token mode their handlers refuse a caller with
    neither a node token nor the key."""
    api = make_client(api_key=KEY, agent_auth="token")
    assert refused(api.request(method, target, json=body)) == "key"


# Each lane route through the lane and through ASGI.

HOT_REQUESTS = {
    Hot.READ: raw("GET /jobs/job-1 HTTP/1.1", KEYED),
    Hot.POLL: raw("GET /jobs?node_id=n1&status=pending HTTP/1.1", f"Authorization: Bearer {KEY}"),
    Hot.SUBMIT: raw("POST /jobs HTTP/1.1", KEYED, "Content-Length: 16", body=b'{"command":"hi"}'),
    Hot.REPORT: raw(
        "PATCH /jobs/job-1 HTTP/1.1", KEYED, "Content-Length: 20", body=b'{"status":"running"}'
    ),
}


@pytest.fixture(scope="module")
def lane_and_asgi(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Front, Front]]:
    with keyed_pair(redis_url, tmp_path_factory.mktemp("routes")) as pair:
        yield pair


@pytest.mark.parametrize("hot", [hot for _, _, _, hot in TABLE.hot()], ids=lambda h: h.value)
def test_each_lane_route_answers_as_asgi_and_is_served_by_the_lane(
    lane_and_asgi: tuple[Front, Front], hot: Hot
) -> None:
    lane, asgi = lane_and_asgi
    before = lane.served, asgi.served
    assert converse(lane.port, [HOT_REQUESTS[hot]]) == converse(asgi.port, [HOT_REQUESTS[hot]])
    assert (lane.served - before[0], asgi.served - before[1]) == (1, 0)

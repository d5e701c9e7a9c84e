"""Guessing a credential, tried as an attacker would (issue 36; docs/SECURITY.md), over HTTP
against `scheduler serve`'s protocol on a real Redis, through the hot lane and through
Starlette: every wrong credential counts, on every route that compares one (the key routes,
the agent routes in either AGENT_AUTH mode, the login form), and past AUTH_FAILURES_MAX its
address's wrong ones are 429; the right key is served from that address all the same, and one
WARNING says what happened. 127.0.0.1 is the attacker, 127.0.0.2 an operator elsewhere."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest
import redis

from scheduler.store.keys import Keys
from tests.conftest import Serve

KEY = "guessed-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
LIMIT = 3


def client(url: str, address: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections leave from `address` (any 127.x address is loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=url, transport=transport, follow_redirects=False)


def guess(n: int) -> dict[str, str]:
    return {"Authorization": f"Bearer guess-{n}"}


def counted(rclient: redis.Redis, prefix: str, address: str = "127.0.0.1") -> int:
    """The wrong credentials Redis counts against `address` in its window."""
    return int(rclient.get(Keys(prefix).auth_failures(address)) or 0)


def warnings_about(caplog: pytest.LogCaptureFixture, address: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith(f"{address}: ")
    ]


# Wrong keys on the key routes: the lane's read, Starlette's listing.
def lane_read(api: httpx.Client, headers: dict[str, str]) -> httpx.Response:
    return api.get("/jobs/job-1", headers=headers)


def asgi_listing(api: httpx.Client, headers: dict[str, str]) -> httpx.Response:
    return api.get("/jobs", headers=headers)


def login(api: httpx.Client, key: str) -> httpx.Response:
    return api.post("/ui/login", data={"key": key})


@pytest.mark.parametrize("mode", ["open", "token"])
def test_past_the_limit_wrong_keys_are_429_and_the_right_key_is_served(
    serve: Serve,
    rclient: redis.Redis,
    prefix: str,
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="scheduler.api")
    url = serve(api_key=KEY, agent_auth=mode, auth_failures_max=LIMIT)
    attacker, operator = client(url), client(url, "127.0.0.2")
    node = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
    assert operator.post("/nodes/register", json=node, headers=OPERATOR).status_code == 201
    assert operator.post("/jobs", json={"command": "x"}, headers=OPERATOR).status_code == 201
    tries: list[Callable[[int], httpx.Response]] = [
        lambda n: lane_read(attacker, guess(n)),
        lambda n: asgi_listing(attacker, guess(n)),
        lambda n: login(attacker, f"guess-{n}"),
    ]
    answers = [tries[n % 3](n).status_code for n in range(LIMIT + 1)]
    assert answers == [401] * LIMIT + [429]
    assert counted(rclient, prefix) == LIMIT + 1
    # Barred: wrong ones are 429 on every route, from this process's bar (nothing more is
    # counted in Redis), with Retry-After; a call without any credential guesses nothing.
    for n, attempt in enumerate(tries):
        refused = attempt(100 + n)
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 300
    assert counted(rclient, prefix) == LIMIT + 1
    assert lane_read(attacker, {}).status_code == 401
    # The right key, from the same address: through the lane, Starlette and the login form.
    assert lane_read(attacker, OPERATOR).status_code == 200
    assert asgi_listing(attacker, OPERATOR).status_code == 200
    assert login(attacker, KEY).status_code == 303
    assert asgi_listing(operator, OPERATOR).status_code == 200
    assert counted(rclient, prefix, "127.0.0.2") == 0
    # Said once, naming the address, the count and the window.
    (said,) = warnings_about(caplog, "127.0.0.1")
    assert f"127.0.0.1: {LIMIT + 1} wrong credentials" in said
    assert "AUTH_FAILURES_WINDOW_SECS=300" in said and f"AUTH_FAILURES_MAX={LIMIT}" in said


# The agent routes that compare a bearer: (method, path, body). A query sends the report
# through Starlette; without one the lane takes it.
AGENT_GUESSES = {
    "report, lane": ("PATCH", "/jobs/job-999999", {"status": "running"}),
    "report, asgi": ("PATCH", "/jobs/job-999999?via=asgi", {"status": "running"}),
    "delete a node": ("DELETE", "/nodes/x", None),
    "drain": ("POST", "/nodes/x/drain", {"by": "stopping"}),
    "undrain": ("POST", "/nodes/x/undrain", None),
    "instances": ("GET", "/instances?node_id=x", None),
    "heartbeat": ("POST", "/nodes/heartbeat", {"id": "x"}),
    "poll, lane": ("GET", "/jobs?node_id=x&status=pending", None),
}
# Open mode compares a bearer with the key on the node calls only; its other agent calls
# read none (anyone may make them, as the original's).
COMPARED = {
    "open": ("delete a node", "drain", "undrain"),
    "token": tuple(AGENT_GUESSES),
}


@pytest.mark.parametrize(
    ("mode", "call"), [(mode, call) for mode, calls in COMPARED.items() for call in calls]
)
def test_a_wrong_bearer_on_an_agent_route_counts(
    serve: Serve, rclient: redis.Redis, prefix: str, mode: str, call: str
) -> None:
    """Issue 36, finding 6: the agent routes compared a bearer with the key but never counted
    a wrong one (8,509 guesses a second on one API process), and answered while the address
    was locked out elsewhere."""
    url = serve(api_key=KEY, agent_auth=mode, auth_failures_max=LIMIT)
    attacker = client(url)
    method, path, body = AGENT_GUESSES[call]
    answers = [
        attacker.request(method, path, json=body, headers=guess(n)).status_code
        for n in range(LIMIT + 2)
    ]
    assert answers == [401] * LIMIT + [429, 429]
    assert counted(rclient, prefix) == LIMIT + 1
    # Barred by any route, refused on all: a wrong key on a key route now is 429 too.
    assert lane_read(attacker, guess(99)).status_code == 429
    assert lane_read(attacker, OPERATOR).status_code == 404  # served: no job-1 here


def test_the_right_node_token_and_join_key_are_served_from_a_barred_address(
    serve: Serve, rclient: redis.Redis, prefix: str
) -> None:
    join = "the-join-key"
    url = serve(api_key=KEY, agent_auth="token", agent_join_key=join, auth_failures_max=LIMIT)
    api = client(url)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
    joined = api.post("/nodes/register", json=node, headers={"Authorization": f"Bearer {join}"})
    token = {"Authorization": f"Bearer {joined.json()['token']}"}
    for n in range(LIMIT + 1):
        api.get("/jobs/job-1", headers=guess(n))
    assert api.get("/jobs/job-1", headers=guess(99)).status_code == 429
    assert api.get("/jobs?node_id=n1&status=pending", headers=token).status_code == 200
    assert api.post("/nodes/heartbeat", json={"id": "n1"}, headers=token).status_code == 200
    assert api.get("/instances?node_id=n1", headers=token).json() == []
    # The join key where it registers: a new id, and a held one (401, not counted).
    two = {**node, "id": "n2"}
    assert api.post(
        "/nodes/register", json=two, headers={"Authorization": f"Bearer {join}"}
    ).is_success
    held = api.post("/nodes/register", json=node, headers={"Authorization": f"Bearer {join}"})
    assert held.status_code == 401
    assert counted(rclient, prefix) == LIMIT + 1


def test_open_mode_counts_a_register_bearer_that_opened_nothing(
    serve: Serve, rclient: redis.Redis, prefix: str
) -> None:
    """Open mode: anyone may register a known id again, but only the key (or the node's
    token) is answered with a token. A wrong key is told apart that way, so it is counted;
    the registration stands, as anyone's (the original Rust agent, which sends no bearer, is
    never counted)."""
    url = serve(api_key=KEY, agent_auth="open", auth_failures_max=LIMIT)
    api = client(url)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
    assert "token" in api.post("/nodes/register", json=node).json()
    again = api.post("/nodes/register", json=node)
    assert again.status_code == 201 and "token" not in again.json()
    assert counted(rclient, prefix) == 0
    guessed = api.post("/nodes/register", json=node, headers=guess(1))
    assert guessed.status_code == 201 and "token" not in guessed.json()
    assert counted(rclient, prefix) == 1
    assert "token" in api.post("/nodes/register", json=node, headers=OPERATOR).json()
    assert counted(rclient, prefix) == 1


# Calls whose answer to the key differs from their answer to anything else without a 401:
# each was a test of the key that nothing counted. (setting overrides, mode, method, path,
# body, the answer to a wrong bearer, the key's).
NODE = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
KEY_ONLY = {
    # The operator's drain: a node's token drains its own node as `stopping` only (403),
    # decided before the token was checked.
    "drain as operator, open": (
        {},
        "open",
        "POST",
        "/nodes/n1/drain",
        {"by": "operator"},
        401,
        200,
    ),
    "drain as operator, token": (
        {},
        "token",
        "POST",
        "/nodes/n1/drain",
        {"by": "operator"},
        401,
        200,
    ),
    # Open mode: anyone may register a known id again, but only the key changes its role.
    "register, another role": (
        {},
        "open",
        "POST",
        "/nodes/register",
        {**NODE, "role": "storage"},
        403,
        201,
    ),
    # Open mode: the key adds a node past MAX_NODES, anyone else is told it is full.
    "register past MAX_NODES": (
        {"max_nodes": 1},
        "open",
        "POST",
        "/nodes/register",
        {**NODE, "id": "n2"},
        503,
        201,
    ),
}


@pytest.mark.parametrize("case", KEY_ONLY)
def test_a_call_only_the_key_passes_counts_a_wrong_bearer(
    serve: Serve, rclient: redis.Redis, prefix: str, case: str
) -> None:
    """A wrong bearer told apart from the key by any answer is a guess: counted, 429 past
    the limit; the call without any bearer keeps its answer, counted nothing."""
    overrides, mode, method, path, body, wrong, right = KEY_ONLY[case]
    url = serve(api_key=KEY, agent_auth=mode, auth_failures_max=LIMIT, **overrides)
    attacker = client(url)
    assert attacker.post("/nodes/register", json=NODE, headers=OPERATOR).status_code == 201
    anonymous = attacker.request(method, path, json=body)
    assert counted(rclient, prefix) == 0
    answers = [
        attacker.request(method, path, json=body, headers=guess(n)).status_code
        for n in range(LIMIT + 1)
    ]
    assert answers == [wrong] * LIMIT + [429]
    assert counted(rclient, prefix) == LIMIT + 1
    assert anonymous.status_code in (401, wrong)
    assert attacker.request(method, path, json=body, headers=OPERATOR).status_code == right


# More doors that compare a bearer, each answered 401 and counted: (mode, method, path, body).
DOORS = [
    ("open", "HEAD", "/jobs/job-1", None),
    ("open", "OPTIONS", "/jobs", None),
    ("open", "GET", "/no-such-route", None),  # a path no route serves needs the key
    ("open", "GET", "/nodes/n1", None),  # a method the route does not serve too
    ("open", "GET", "/metrics", None),
    ("open", "GET", "/jobs/job-1?wait=0.1", None),  # a long-poll, through ASGI
    ("open", "GET", "/services/svc-1", None),
    ("token", "GET", "/jobs?node_id=n1&status=pending&wait=0.1", None),
    ("token", "POST", "/services", {"node_id": "n1", "job_id": "job-1", "name": "s"}),
    ("token", "PATCH", "/services/svc-1", {"status": "stopped"}),
    ("token", "GET", "/services?node_id=n1", None),
    ("token", "POST", "/nodes/register", {**NODE, "id": "new-one"}),  # a new id
    ("token", "POST", "/nodes/register", {**NODE, "role": "storage"}),
]


@pytest.mark.parametrize(("mode", "method", "path", "body"), DOORS)
def test_a_wrong_bearer_counts_at_every_door(
    serve: Serve,
    rclient: redis.Redis,
    prefix: str,
    mode: str,
    method: str,
    path: str,
    body: dict[str, object] | None,
) -> None:
    url = serve(api_key=KEY, agent_auth=mode, auth_failures_max=LIMIT, metrics="on")
    attacker = client(url)
    assert attacker.post("/nodes/register", json=NODE, headers=OPERATOR).status_code == 201
    answers = [
        attacker.request(method, path, json=body, headers=guess(n)).status_code
        for n in range(LIMIT + 1)
    ]
    assert answers == [401] * LIMIT + [429]
    assert counted(rclient, prefix) == LIMIT + 1

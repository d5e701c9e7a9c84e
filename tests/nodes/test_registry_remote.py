"""An external registry (REGISTRY_URL set): node selection over the tiny-aws registry protocol
(CONTRACT 2.6) against a real fake registry served on a loopback port, every error text as a
503, the instance-bound placement, the forwarded API key and the per-process cache."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from scheduler.nodes.placement import choose
from scheduler.nodes.registry import TTLCache
from tests.conftest import ClientFactory, assert_json, assert_text_error
from tests.redis_server import free_port


def node_map(**statuses: str) -> bytes:
    nodes = {
        node_id: {
            "id": node_id,
            "hostname": node_id,
            "cpu_count": 2,
            "role": "compute",
            "status": s,
        }
        for node_id, s in statuses.items()
    }
    return msgspec.json.encode(nodes)


def instance(node_id: str, status: str = "running", instance_id: str = "i-1") -> bytes:
    body = {"id": instance_id, "node_id": node_id, "status": status, "instance_type": "small"}
    return msgspec.json.encode(body)


@dataclass
class Seen:
    path: str
    query: str
    authorization: str | None


@dataclass
class FakeRegistry:
    """What the registry answers, settable per test, and what it was asked."""

    url: str = ""
    nodes: tuple[int, bytes] = (200, b"{}")
    instances: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    delay: float = 0.0
    seen: list[Seen] = field(default_factory=list)

    def reset(self) -> None:
        self.nodes, self.instances, self.delay, self.seen = (200, b"{}"), {}, 0.0, []

    def calls(self, path: str) -> int:
        return sum(1 for s in self.seen if s.path == path)

    async def answer(self, request: Request) -> Response:
        path = request.url.path
        self.seen.append(Seen(path, request.url.query, request.headers.get("authorization")))
        if self.delay:
            await asyncio.sleep(self.delay)
        if path == "/nodes" and request.query_params.get("role") == "compute":
            status, body = self.nodes
        elif path.startswith("/instances/") and path[len("/instances/") :] in self.instances:
            status, body = self.instances[path[len("/instances/") :]]
        elif path.startswith("/instances/"):
            status, body = 404, b"instance not found\n"
        else:
            status, body = 404, b"404 page not found\n"
        return Response(body, status_code=status, media_type="application/json")


@contextlib.contextmanager
def serve(app: Starlette) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="fake-registry", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "fake registry did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def served_registry() -> Iterator[FakeRegistry]:
    fake = FakeRegistry()
    app = Starlette(routes=[Route("/{path:path}", fake.answer, methods=["GET"])])
    with serve(app) as url:
        fake.url = url
        yield fake


@pytest.fixture
def registry(served_registry: FakeRegistry) -> Iterator[FakeRegistry]:
    served_registry.reset()
    yield served_registry
    served_registry.reset()


@pytest.fixture
def api(make_client: ClientFactory, registry: FakeRegistry) -> TestClient:
    return make_client(registry_url=registry.url, registry_cache_secs=0)


def post_job(api: TestClient, **body: str) -> Any:
    return api.post("/jobs", json={"command": "x", **body})


# Placement over the registry's nodes.


def test_round_robin_over_the_registry_nodes(api: TestClient, registry: FakeRegistry) -> None:
    registry.nodes = (200, node_map(**{"n-2": "healthy", "n-1": "healthy", "n-3": "unhealthy"}))
    placed = [assert_json(post_job(api), 201)["node_id"] for _ in range(3)]
    placed.append(assert_json(api.get("/schedule"))["node_id"])
    assert placed == [choose(["n-1", "n-2"], t) for t in range(1, 5)]
    assert {(s.path, s.query) for s in registry.seen} == {("/nodes", "role=compute")}
    assert all(s.authorization is None for s in registry.seen)


def test_trailing_slash_in_registry_url(make_client: ClientFactory, registry: FakeRegistry) -> None:
    registry.nodes = (200, node_map(**{"n-1": "healthy"}))
    api = make_client(registry_url=registry.url + "/", registry_cache_secs=0)
    assert assert_json(post_job(api), 201)["node_id"] == "n-1"
    assert registry.calls("/nodes") == 1


def test_registry_routes_are_not_served(api: TestClient) -> None:
    """The agents' calls go to the registry; GET /nodes reads it (tests/api/test_nodes_external)."""
    for method, path in [
        ("POST", "/nodes/register"),
        ("POST", "/nodes/heartbeat"),
        ("DELETE", "/nodes/n-1"),
        ("GET", "/instances"),
    ]:
        assert_text_error(api.request(method, path, json={"id": "n-1"}), 404, "404 page not found")


@pytest.mark.parametrize(
    "nodes, message",
    [
        ((401, b"unauthorized\n"), "failed to decode registry response"),
        ((200, b"[]"), "failed to decode registry response"),
        ((200, b'{"n-1":"healthy"}'), "failed to decode registry response"),
        ((200, b"null"), "failed to decode registry response"),
        ((200, b""), "failed to decode registry response"),
        ((200, b"{}"), "no healthy compute nodes"),
        ((200, node_map(**{"n-1": "unhealthy"})), "no healthy compute nodes"),
        ((500, node_map(**{"n-1": "healthy"})[:-1]), "failed to decode registry response"),
    ],
)
def test_node_list_errors_are_503(
    api: TestClient, registry: FakeRegistry, nodes: tuple[int, bytes], message: str
) -> None:
    registry.nodes = nodes
    assert_text_error(post_job(api), 503, message)
    assert_text_error(api.get("/schedule"), 503, message)
    assert api.get("/jobs").content == b"[]\n"


def test_unreachable_registry_is_503(make_client: ClientFactory) -> None:
    api = make_client(registry_url=f"http://127.0.0.1:{free_port()}", registry_cache_secs=0)
    assert_text_error(post_job(api), 503, "failed to reach registry")
    assert_text_error(post_job(api, instance_id="i-1"), 503, "failed to reach registry")
    assert_text_error(api.get("/schedule"), 503, "failed to reach registry")
    assert api.get("/jobs").content == b"[]\n"


def test_hung_registry_times_out_as_unreachable(
    make_client: ClientFactory, registry: FakeRegistry
) -> None:
    registry.nodes = (200, node_map(**{"n-1": "healthy"}))
    registry.delay = 1.5
    api = make_client(registry_url=registry.url, registry_cache_secs=0, registry_timeout_secs=0.2)
    assert_text_error(post_job(api), 503, "failed to reach registry")


# Instance-bound placement.


def test_instance_bound_job_goes_to_the_instance_node(
    api: TestClient, registry: FakeRegistry
) -> None:
    registry.nodes = (200, node_map(**{"n-1": "healthy", "n-2": "healthy"}))
    registry.instances["i-1"] = (200, instance("n-2"))
    placed = [assert_json(post_job(api, instance_id="i-1"), 201) for _ in range(3)]
    assert [(j["node_id"], j["instance_id"]) for j in placed] == [("n-2", "i-1")] * 3
    assert registry.calls("/instances/i-1") == 3
    # Bound jobs draw no round-robin ticket: the first free placement is ticket 1.
    assert assert_json(post_job(api), 201)["node_id"] == "n-1"


@pytest.mark.parametrize(
    "answer, message",
    [
        ((404, b"instance not found\n"), "instance not found"),
        ((500, b"boom\n"), "registry error: boom"),
        ((403, b"forbidden"), "registry error: forbidden"),
        ((401, b"unauthorized\n"), "registry error: unauthorized"),
        ((200, b"not json"), "failed to decode instance"),
        ((200, b"[]"), "failed to decode instance"),
        ((200, b'{"id":"i-1","node_id":5}'), "failed to decode instance"),
        ((200, instance("n-1", "provisioning")), "instance i-1 not running (status=provisioning)"),
        ((200, instance("n-1", "terminated")), "instance i-1 not running (status=terminated)"),
        ((200, instance("n-9")), "node n-9 for instance i-1 is not healthy"),
        ((200, instance("n-3")), "node n-3 for instance i-1 is not healthy"),
    ],
)
def test_instance_errors_are_503(
    api: TestClient, registry: FakeRegistry, answer: tuple[int, bytes], message: str
) -> None:
    registry.nodes = (200, node_map(**{"n-1": "healthy", "n-3": "unhealthy"}))
    registry.instances["i-1"] = answer
    assert_text_error(post_job(api, instance_id="i-1"), 503, message)
    assert api.get("/jobs").content == b"[]\n"


@pytest.mark.parametrize("instance_id", [".", "..", "..."])
def test_instance_id_cannot_leave_the_instance_path(
    api: TestClient, registry: FakeRegistry, instance_id: str
) -> None:
    """Ids made of dots are path segments to a URL library; the registry must never be asked
    for anything but /nodes and /instances/<that id> (CONTRACT 8.15)."""
    registry.nodes = (200, node_map(**{"n-1": "healthy"}))
    response = post_job(api, instance_id=instance_id)
    assert response.status_code in (400, 503), response.text
    assert {s.path for s in registry.seen} <= {"/nodes", f"/instances/{instance_id}"}
    assert api.get("/jobs").content == b"[]\n"


# The API key and the cache.


@pytest.mark.parametrize("key", ["", "k3y"])
def test_api_key_is_forwarded_to_the_registry(
    make_client: ClientFactory, registry: FakeRegistry, key: str
) -> None:
    registry.nodes = (200, node_map(**{"n-1": "healthy"}))
    registry.instances["i-1"] = (200, instance("n-1"))
    api = make_client(registry_url=registry.url, registry_cache_secs=0, api_key=key)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    assert api.post("/jobs", json={"command": "x"}, headers=headers).status_code == 201
    body = {"command": "x", "instance_id": "i-1"}
    assert api.post("/jobs", json=body, headers=headers).status_code == 201
    assert api.get("/schedule", headers=headers).status_code == 200
    assert [s.path for s in registry.seen] == ["/nodes", "/instances/i-1", "/nodes", "/nodes"]
    expected = f"Bearer {key}" if key else None
    assert {s.authorization for s in registry.seen} == {expected}


@pytest.mark.parametrize("cache_secs, calls", [(0, 3), (60, 1)])
def test_registry_answers_are_cached(
    make_client: ClientFactory, registry: FakeRegistry, cache_secs: float, calls: int
) -> None:
    registry.nodes = (200, node_map(**{"n-1": "healthy", "n-2": "healthy"}))
    registry.instances["i-1"] = (200, instance("n-2"))
    api = make_client(registry_url=registry.url, registry_cache_secs=cache_secs)
    for _ in range(3):
        assert post_job(api).status_code == 201
    assert registry.calls("/nodes") == calls
    for _ in range(3):
        assert post_job(api, instance_id="i-1").status_code == 201
    assert registry.calls("/instances/i-1") == calls
    assert registry.calls("/nodes") == (1 if cache_secs else 6)


def test_failures_are_not_cached(make_client: ClientFactory, registry: FakeRegistry) -> None:
    registry.nodes = (500, b"registry restarting\n")
    registry.instances["i-1"] = (500, b"busy")
    api = make_client(registry_url=registry.url, registry_cache_secs=60)
    assert_text_error(post_job(api), 503, "failed to decode registry response")
    assert_text_error(post_job(api, instance_id="i-1"), 503, "registry error: busy")
    registry.nodes = (200, node_map(**{"n-1": "healthy"}))
    registry.instances["i-1"] = (200, instance("n-1"))
    assert assert_json(post_job(api), 201)["node_id"] == "n-1"
    assert assert_json(post_job(api, instance_id="i-1"), 201)["node_id"] == "n-1"


def test_cached_nodes_expire(make_client: ClientFactory, registry: FakeRegistry) -> None:
    registry.nodes = (200, node_map(**{"n-1": "healthy"}))
    api = make_client(registry_url=registry.url, registry_cache_secs=0.3)
    assert assert_json(post_job(api), 201)["node_id"] == "n-1"
    registry.nodes = (200, node_map(**{"n-1": "unhealthy"}))
    deadline = time.monotonic() + 10
    while post_job(api).status_code == 201:
        assert time.monotonic() < deadline, "the cached node list never expired"
        time.sleep(0.05)
    assert_text_error(post_job(api), 503, "no healthy compute nodes")


def test_an_entry_is_as_old_as_its_loads_start() -> None:
    """An answer asked for before a node registered must not outlive `ttl` from the asking,
    however long it took to come: `scheduler up` waits REGISTRY_CACHE_SECS after the API
    first lists its agent's node, for every API process's cache to have let go of older ones."""
    now = [0.0]
    cache: TTLCache[int] = TTLCache(10.0, clock=lambda: now[0])
    loads = []

    async def slow_load() -> int:
        now[0] += 4.0  # the registry took 4 s to answer
        loads.append(now[0])
        return len(loads)

    async def main() -> list[int]:
        first = await cache.get("compute", slow_load)  # asked at 0, answered at 4
        now[0] = 9.9
        cached = await cache.get("compute", slow_load)
        now[0] = 10.0  # 10 s after the asking: stale, though answered only 6 s ago
        return [first, cached, await cache.get("compute", slow_load)]

    assert asyncio.run(main()) == [1, 1, 2]


def test_cache_locks_stay_bounded_when_loads_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failures are not cached, so every new instance id that fails (an unknown one, one
    still provisioning) must not leave its single-flight lock behind for ever: POST /jobs
    with ever new instance ids would grow the API's memory without bound."""
    monkeypatch.setattr(TTLCache, "MAX_ENTRIES", 50)
    cache: TTLCache[int] = TTLCache(60.0)

    async def fail() -> int:
        raise RuntimeError("instance not found")

    async def main() -> None:
        for n in range(500):
            with contextlib.suppress(RuntimeError):
                await cache.get(f"i-{n}", fail)

    asyncio.run(main())
    assert len(cache._locks) <= TTLCache.MAX_ENTRIES

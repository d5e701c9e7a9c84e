"""GET /nodes with an external registry (REGISTRY_URL set): the registry's nodes in the
built-in registry's shape, read through placement's cached read, behind the same key, with
nothing but a node's fields passed on; a registry that cannot answer is a clear 503, and
`scheduler nodes` says the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.cli.main import main
from tests.api.test_nodes import NODE_FIELDS, ROLES
from tests.conftest import BOTH_FRONTS, ClientFactory, SettingsFactory, assert_json
from tests.conftest import assert_text_error as assert_error
from tests.fakes import FakeRegistry
from tests.redis_server import free_port
from tests.servers import serving

KEY = "the-operators-key"
SECRET = "registry-only-secret"
CANNOT = "cannot list the nodes of the registry at REGISTRY_URL: "


def node(hostname: str, role: str = "compute", **more: Any) -> dict[str, Any]:
    """A node as the original registry answers it, plus what another registry might add."""
    seen = "2026-01-01T10:00:00Z"
    base = {"hostname": hostname, "addr": f"{hostname}:8080", "cpu_count": 4, "role": role}
    return {**base, "last_seen": seen, "token": SECRET, "api_key": SECRET, **more}


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as fake:
        fake.nodes.update({"n1": "healthy", "n2": "unhealthy", "s1": "healthy"})
        fake.fields.update({"n1": node("h1"), "n2": node("h2"), "s1": node("h3", "storage")})
        yield fake


@pytest.fixture
def api(make_client: ClientFactory, registry: FakeRegistry) -> TestClient:
    return make_client(registry_url=registry.url, registry_cache_secs=60, api_key=KEY)


AUTH = {"Authorization": f"Bearer {KEY}"}


@BOTH_FRONTS
def test_get_nodes_lists_the_registrys_nodes_as_the_builtin_does(api: TestClient) -> None:
    response = api.get("/nodes", headers=AUTH)
    listed = assert_json(response)
    assert set(listed) == {"n1", "n2", "s1"}
    assert all(set(found) == NODE_FIELDS for found in listed.values())  # the built-in's shape
    assert listed["n1"] == {
        "id": "n1",
        "hostname": "h1",
        "addr": "h1:8080",
        "cpu_count": 4,
        "role": "compute",
        "status": "healthy",
        "last_seen": "2026-01-01T10:00:00Z",
        "memory_mb": 0,  # ours: the original registry knows neither
        "labels": {},
    }
    assert listed["n2"]["status"] == "unhealthy"
    assert SECRET.encode() not in response.content  # only a node's fields are passed on
    assert set(assert_json(api.get("/nodes?role=compute", headers=AUTH))) == {"n1", "n2"}
    assert set(assert_json(api.get("/nodes?role=storage", headers=AUTH))) == {"s1"}
    assert_error(api.get("/nodes?role=gpu", headers=AUTH), 400, ROLES)


@BOTH_FRONTS
def test_get_nodes_needs_the_key_as_the_builtin_does(api: TestClient) -> None:
    assert_error(api.get("/nodes"), 401, "unauthorized")
    assert_error(api.get("/nodes", headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
    assert api.get("/nodes", headers=AUTH).status_code == 200


def test_the_compute_nodes_are_placements_own_cached_read(
    api: TestClient, registry: FakeRegistry
) -> None:
    """What GET /nodes?role=compute lists as healthy is what a submission is placed on (the
    one cache entry `scheduler up` waits on); other roles are filtered here, so no client
    text reaches the registry's URL."""
    assert set(assert_json(api.get("/nodes?role=compute", headers=AUTH))) == {"n1", "n2"}
    registry.nodes["n1"] = "unhealthy"  # unseen for REGISTRY_CACHE_SECS
    assert (
        assert_json(api.post("/jobs", json={"command": "x"}, headers=AUTH), 201)["node_id"] == "n1"
    )
    assert api.get("/nodes", params={"role": "storage"}, headers=AUTH).status_code == 200
    for role in ("compute&role=storage", "../instances/i-1", "x?y#z"):
        response = api.get("/nodes", params={"role": role}, headers=AUTH)
        assert_error(response, 400, ROLES)
    asked = [path for method, path in registry.seen]
    assert asked == ["/nodes?role=compute", "/nodes"]


@pytest.mark.parametrize(
    ("failing", "fields", "message"),
    [
        (500, {}, "registry answered 500"),  # its {} must not read as "no nodes"
        (401, {}, "registry answered 401"),
        (0, {"cpu_count": "4"}, "failed to decode registry response"),
        (0, {"id": 7}, "failed to decode registry response"),
    ],
)
def test_a_registry_that_cannot_answer_is_a_clear_503(
    api: TestClient, registry: FakeRegistry, failing: int, fields: dict[str, Any], message: str
) -> None:
    registry.failing = failing
    registry.fields["n1"].update(fields)
    assert_error(api.get("/nodes", headers=AUTH), 503, CANNOT + message)
    assert_error(api.get("/nodes?role=compute", headers=AUTH), 503, CANNOT + message)


def test_placement_does_not_need_what_only_the_listing_reads(
    api: TestClient, registry: FakeRegistry
) -> None:
    registry.fields["n1"]["cpu_count"] = "4"
    assert_error(
        api.get("/nodes?role=compute", headers=AUTH),
        503,
        CANNOT + "failed to decode registry response",
    )
    assert (
        assert_json(api.post("/jobs", json={"command": "x"}, headers=AUTH), 201)["node_id"] == "n1"
    )


def test_an_unreachable_registry_is_a_clear_503(make_client: ClientFactory) -> None:
    api = make_client(registry_url=f"http://user:pw@127.0.0.1:{free_port()}")
    response = api.get("/nodes")
    assert_error(response, 503, CANNOT + "failed to reach registry")
    assert b"pw" not in response.content


def test_scheduler_nodes_prints_the_registrys_nodes(
    make_settings: SettingsFactory,
    registry: FakeRegistry,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = make_settings(registry_url=registry.url, registry_cache_secs=0, api_key=KEY)
    app = create_app(settings)
    with serving(app) as port:
        monkeypatch.setenv("SCHEDULER_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("TINYAWS_API_KEY", KEY)
        assert main(["nodes"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert [line.split()[:3] for line in out[1:]] == [
            ["n1", "compute", "healthy"],
            ["n2", "compute", "unhealthy"],
            ["s1", "storage", "healthy"],
        ]
        registry.failing = 500
        assert main(["nodes", "--role", "storage"]) == 1
        err = capsys.readouterr().err
        assert err.strip() == f"error: {CANNOT}registry answered 500 (503)"

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.app import create_app
from scheduler.config import Settings
from tests.redis_server import redis_server

SettingsFactory = Callable[..., Settings]
ClientFactory = Callable[..., TestClient]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests sharing the server never see each other."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def rclient(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def make_settings(redis_url: str, prefix: str) -> SettingsFactory:
    def make(**overrides: Any) -> Settings:
        base: dict[str, Any] = {"redis_url": redis_url, "redis_prefix": prefix}
        return Settings.from_env({}, **{**base, **overrides})

    return make


@pytest.fixture
def make_client(make_settings: SettingsFactory) -> Iterator[ClientFactory]:
    opened: list[TestClient] = []

    def make(settings: Settings | None = None, **overrides: Any) -> TestClient:
        client = TestClient(create_app(settings or make_settings(**overrides)))
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    """The API with the built-in registry and default settings."""
    return make_client()


def register(client: TestClient, *node_ids: str) -> None:
    for node_id in node_ids:
        body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
        assert client.post("/nodes/register", json=body).status_code == 201

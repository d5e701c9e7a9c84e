from __future__ import annotations

import contextlib
import html
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.config import Settings
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests import servers
from tests.bytecode import compile_product
from tests.fakes import FakeSNS
from tests.processes import TEST_HOSTS
from tests.redis_server import RestartableRedis, redis_server
from tests.servers import lane_checked_client, serving
from tests.ssl_contexts import share_ssl_contexts
from workers import context
from workers.context import Context

SettingsFactory = Callable[..., Settings]
ClientFactory = Callable[..., TestClient]
CtxFactory = Callable[..., Context]


# Everything the suite and the processes it starts write to a temporary folder (the
# scheduler's `sched-test-*` databases, agents' work folders, chromium's profiles, redis'
# files) goes under one folder of its own, removed when the run ends: a run leaves nothing in
# /tmp. pytest's own tmp_path folders are kept only for failed tests (pyproject.toml). The
# agents' and up's state (node tokens, the session's key: XDG_STATE_HOME) goes there too,
# not to the user's ~/.local/state.
_SUITE_TMP = ""


def pytest_configure(config: pytest.Config) -> None:
    global _SUITE_TMP
    # pytest's tmp_path folders stay where pytest keeps them (failed tests' survive the run).
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    _SUITE_TMP = tempfile.mkdtemp(prefix="scheduler-suite-")
    os.environ["TMPDIR"] = _SUITE_TMP
    os.environ["XDG_STATE_HOME"] = os.path.join(_SUITE_TMP, "state")
    tempfile.tempdir = _SUITE_TMP
    # The httpx clients of the test process share their SSL contexts (tests/ssl_contexts.py):
    # each one made read the CA bundle, minutes of CPU a run.
    share_ssl_contexts()
    if not hasattr(config, "workerinput"):  # once, before pytest-xdist starts its workers
        compile_product()  # tests/bytecode.py: each process started compiled the product


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SUITE_TMP:
        tempfile.tempdir = None
        os.environ.pop("TMPDIR", None)
        os.environ.pop("XDG_STATE_HOME", None)
        shutil.rmtree(_SUITE_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url
        for thread in servers.STOPPING:  # before their Redis goes
            thread.join(timeout=10)


@pytest.fixture
def sns() -> Iterator[FakeSNS]:
    """A fake SNS (tests/fakes.py) on a free loopback port, recording every publish."""
    with FakeSNS() as fake:
        yield fake


@pytest.fixture
def restartable_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    """A private redis-server with an fsynced append-only file, that a test can kill -9 and
    start again on the same port without losing an acknowledged write."""
    data = tmp_path / "redis"
    data.mkdir()
    with RestartableRedis(str(data)) as server:
        yield server


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
def make_settings(redis_url: str, prefix: str, tmp_path: Path) -> SettingsFactory:
    def make(**overrides: Any) -> Settings:
        # A snapshot file of the test's own: a scheduler.db lying in the working directory
        # must never be restored into a test's Redis.
        base: dict[str, Any] = {
            "redis_url": redis_url,
            "redis_prefix": prefix,
            "scheduler_db": str(tmp_path / "scheduler.db"),
            # An upgrade watches the old keys this long (tests of the watch set their own).
            "upgrade_watch_secs": 0.2,
            "allowed_hosts": TEST_HOSTS,
            # A follower's stream answers what is there and ends (Starlette's TestClient
            # reads a whole response before it returns); tests of following set their own.
            "follow_max_secs": 0,
        }
        return Settings.from_env({}, **{**base, **overrides})

    return make


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The test's snapshot file: make_settings points SCHEDULER_DB at it."""
    return tmp_path / "scheduler.db"


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    """The settings `store` uses; a module overrides this fixture to change them."""
    return make_settings()


@pytest.fixture
def store(settings: Settings) -> Iterator[SyncJobStore]:
    s = SyncJobStore.connect(settings)
    yield s
    s.close()


@pytest.fixture
def ctx_overrides() -> dict[str, Any]:
    """Settings every worker context of a module gets; a module overrides this fixture."""
    return {}


@pytest.fixture
def make_ctx(make_settings: SettingsFactory, ctx_overrides: dict[str, Any]) -> Iterator[CtxFactory]:
    """Configures the worker context (workers.context) as a worker process would."""

    def make(**overrides: Any) -> Context:
        base: dict[str, Any] = {"http_timeout_secs": 1.0, **ctx_overrides}
        return context.configure(make_settings(**{**base, **overrides}))

    yield make
    context.close()


@pytest.fixture
def front(request: pytest.FixtureRequest) -> str:
    """How make_client's clients reach the app: "asgi", in process through Starlette's
    TestClient, or "lane", over a socket to uvicorn running `scheduler serve`'s protocol,
    whose hot lane (scheduler/api/lane.py) answers the hot calls without ASGI. A module
    whose tests must hold both ways sets `pytestmark = BOTH_FRONTS`."""
    return str(getattr(request, "param", "asgi"))


BOTH_FRONTS = pytest.mark.parametrize("front", ["asgi", "lane"], indirect=True)


@pytest.fixture
def make_client(make_settings: SettingsFactory, front: str) -> Iterator[ClientFactory]:
    with contextlib.ExitStack() as opened:

        def make(settings: Settings | None = None, **overrides: Any) -> TestClient:
            app = create_app(settings or make_settings(**overrides))
            if front == "lane":
                port = opened.enter_context(serving(app))
                client = lane_checked_client(app, f"http://127.0.0.1:{port}")
                return opened.enter_context(client)  # type: ignore[return-value]
            return opened.enter_context(TestClient(app))

        yield make


Serve = Callable[..., str]


@pytest.fixture
def serve(make_settings: SettingsFactory) -> Iterator[Serve]:
    """Settings overrides -> the URL of an API served over a real socket (the lane's
    protocol, as `scheduler serve`)."""
    with contextlib.ExitStack() as stack:

        def start(**overrides: Any) -> str:
            app = create_app(make_settings(**overrides))
            return f"http://127.0.0.1:{stack.enter_context(serving(app))}"

        yield start


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    """The API with the built-in registry and default settings."""
    return make_client()


def last_heard(rclient: redis.Redis, settings: Settings, node: str, at: float) -> None:
    """Make the built-in registry's node `node` last heard from at `at` (epoch s)."""
    keys = Keys(settings.redis_prefix)
    rclient.zadd(keys.nodes_compute, {node: at})
    rclient.zadd(keys.nodes_seen, {node: at})


def register(client: TestClient, *node_ids: str) -> None:
    for node_id in node_ids:
        body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
        assert client.post("/nodes/register", json=body).status_code == 201


# Helpers for the API tests (tests/api/ and friends).

Json = dict[str, Any]


def submit(client: TestClient, **fields: Any) -> Json:
    """POST /jobs that must succeed; returns the created job."""
    response = client.post("/jobs", json=fields)
    assert response.status_code == 201, response.text
    job: Json = response.json()
    return job


def report(client: TestClient, job_id: str, status: str, **fields: Any) -> Any:
    """PATCH /jobs/{id} as an agent would; returns the response."""
    return client.patch(f"/jobs/{job_id}", json={"status": status, **fields})


def assert_text_error(response: Any, status: int, message: str) -> None:
    """An error shaped like Go's http.Error: plain text, message + newline, nosniff."""
    assert response.status_code == status, response.text
    assert response.text == message + "\n"
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["x-content-type-options"] == "nosniff"


def assert_ui_error(response: Any, status: int, message: str) -> None:
    """An error under /ui (api/ui_errors.py): a page of the UI, with its navigation and the
    message escaped."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert f'<p class="error" id="error">{html.escape(message)}</p>' in response.text
    assert '<a href="/ui/jobs">Jobs</a>' in response.text


def assert_json(response: Any, status: int = 200) -> Any:
    """A success shaped like Go's json.Encoder output; returns the decoded body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.content.endswith(b"\n")
    body = response.json()
    assert null_paths(body) == [], "the agent drops JSON with a null in it"
    return body


def null_paths(value: Any, path: str = "$") -> list[str]:
    """Where `value` (decoded JSON) holds a null, recursively."""
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in null_paths(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in null_paths(v, f"{path}[{i}]")]
    return []

"""The product on a Redis reached over a unix socket only (REDIS_URL=unix://, README
"Configuration"): the redis-server here listens on no TCP port at all, so any client that
loses the socket's path fails instead of quietly working against another Redis.

It did once: the blocking clients' connection class put TCP's connect before the socket's,
and unix:// reached localhost:6379, the machine's own Redis, from the restore at start, the
workers and the snapshot. The first fixture checks, read-only, that the blocking client is on
the socket before any test writes anything."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from scheduler.config import Settings
from scheduler.store.jobs import SyncJobStore
from scheduler.store.keys import Keys
from scheduler.store.topology import NotPrimary, sync_client
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    CtxFactory,
    SettingsFactory,
    assert_json,
    register,
    report,
    submit,
)
from tests.processes import scheduler_env, wait_http, worker_burst
from tests.redis_server import free_port, redis_server
from tests.test_faults import Fleet
from workers import tasks


@pytest.fixture(scope="module")
def socket_url() -> Iterator[str]:
    with redis_server(unix_socket=True) as url:
        path = url.removeprefix("unix://")
        client = sync_client(Settings.from_env({}, redis_url=url))
        try:
            assert client.config_get("unixsocket") == {"unixsocket": path}
            assert client.config_get("port") == {"port": "0"}
        finally:
            client.close()
        yield url


def direct(url: str, db: int = 0) -> redis.Redis:
    return redis.Redis(unix_socket_path=url.removeprefix("unix://"), db=db)


def test_the_blocking_client_reaches_the_socket_and_its_db(socket_url: str, prefix: str) -> None:
    client = sync_client(Settings.from_env({}, redis_url=f"{socket_url}?db=3"))
    try:
        client.set(f"{prefix}:probe", "on db 3")
    finally:
        client.close()
    assert direct(socket_url, db=3).get(f"{prefix}:probe") == b"on db 3"
    assert direct(socket_url, db=0).get(f"{prefix}:probe") is None


@BOTH_FRONTS
def test_a_job_goes_from_submit_to_done_and_into_the_snapshot(
    socket_url: str, prefix: str, make_client: ClientFactory, make_ctx: CtxFactory
) -> None:
    api = make_client(redis_url=socket_url)
    register(api, "n1")
    job = submit(api, command="echo hello")
    polled = assert_json(api.get("/jobs", params={"node_id": "n1", "status": "pending"}))
    assert [j["job_id"] for j in polled] == [job["job_id"]]
    assert report(api, job["job_id"], "running").status_code == 200
    assert report(api, job["job_id"], "done", exit_code=0, stdout="hello").status_code == 200
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "done"
    # The restore at start (a blocking client, in a thread) marked this Redis as settled.
    assert direct(socket_url).exists(Keys(prefix).initialised)
    ctx = make_ctx(redis_url=socket_url)
    tasks.sweep(1)
    assert tasks.snapshot(1) == 1
    with sqlite3.connect(ctx.settings.scheduler_db) as db:
        assert list(db.execute("SELECT id, status FROM jobs")) == [("job-1", "done")]


def test_serve_and_a_worker_run_over_the_socket(
    socket_url: str, prefix: str, tmp_path: Path
) -> None:
    env = scheduler_env(socket_url, prefix, SCHEDULER_DB=str(tmp_path / "snap.db"))
    fleet = Fleet(env, tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        fleet.start("api", "serve", "--host", "127.0.0.1", "--port", str(port))
        wait_http(f"{url}/health")
        assert httpx.post(f"{url}/nodes/register", json={"id": "n1"}).status_code == 201
        job_id = httpx.post(f"{url}/jobs", json={"command": "echo hi"}).json()["job_id"]
        for status in ("running", "done"):
            answer = httpx.patch(f"{url}/jobs/{job_id}", json={"status": status, "exit_code": 0})
            assert answer.status_code == 200, answer.text
    finally:
        fleet.stop_all()
    worker_burst(env)
    with sqlite3.connect(tmp_path / "snap.db") as db:
        assert list(db.execute("SELECT id, status FROM jobs")) == [(job_id, "done")]
    assert (tmp_path / "api.log").read_text().count("Traceback") == 0
    assert fleet.alive() == {"api": False}


def test_a_replica_on_a_socket_is_refused_as_not_the_primary_naming_the_socket(
    make_settings: SettingsFactory,
) -> None:
    with redis_server() as primary:
        port = primary.rsplit(":", 1)[1].split("/")[0]
        with redis_server("--replicaof", "127.0.0.1", port, unix_socket=True) as replica:
            store = SyncJobStore.connect(make_settings(redis_url=replica))
            try:
                with pytest.raises(NotPrimary, match=f"{replica.removeprefix('unix://')} is not"):
                    store.registry_unreadable()  # a DEL
            finally:
                store.close()

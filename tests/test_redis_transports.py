"""The product on a Redis reached over a unix socket only (REDIS_URL=unix://), over TLS only
(rediss://, a private CA and a client certificate), and asking for a password or an ACL
user's credentials, directly or behind sentinels that ask for their own (README
"Configuration"). These redis-servers listen on nothing else and
let nothing in without the credentials, so a client that loses the socket's path, the TLS
options or the credentials fails instead of quietly working against another Redis.

Both were broken once, each in one of the two kinds of client (the API's multiplexed
connection, connection/mux.py; the blocking redis-py clients of the restore at start, the workers
and the snapshot, topology.sync_client):
- unix://: the blocking clients' connection class put TCP's connect before the socket's, and
  reached localhost:6379, the machine's own Redis. The socket's fixture checks, read-only,
  that the blocking client is on the socket before any test writes anything;
- rediss://: the API's connection ignored the URL's TLS options (a private CA, a client
  certificate) that redis-py read, so the workers reached Redis and the API answered 503."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis

from scheduler.config import Settings
from scheduler.store import ops
from scheduler.store.connection.blocking import sync_client
from scheduler.store.connection.discovery import NotPrimary
from scheduler.store.connection.mux import MuxRedis
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    CtxFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)
from tests.processes import scheduler_env, wait_http, worker_burst
from tests.redis_server import (
    TlsFiles,
    free_port,
    make_tls_files,
    redis_server,
    sentinel_group,
)
from tests.test_faults import Fleet
from workers import tasks


@pytest.fixture(scope="module")
def unix_url() -> Iterator[str]:
    with redis_server(unix_socket=True) as url:
        path = url.removeprefix("unix://")
        client = sync_client(Settings.from_env({}, redis_url=url))
        try:
            assert client.config_get("unixsocket") == {"unixsocket": path}
            assert client.config_get("port") == {"port": "0"}
        finally:
            client.close()
        yield url


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(str(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="module")
def tls_url(tls_files: TlsFiles) -> Iterator[str]:
    with redis_server(tls=tls_files) as url:
        yield url


# A password and an ACL user of the deployment's own, with characters a URL must encode.
PASSWORD = "pa:ss@w/rd%"
ACL_USER = ("sched.uler", "us@r:pw")


@pytest.fixture(scope="module")
def password_url() -> Iterator[str]:
    with redis_server("--requirepass", PASSWORD) as url:
        yield url.replace("redis://", f"redis://:{quote(PASSWORD, safe='')}@")


@pytest.fixture(scope="module")
def acl_url() -> Iterator[str]:
    name, password = ACL_USER
    # The default user is off: only this user's credentials reach anything.
    rule = [name, "on", f">{password}", "~*", "&*", "+@all"]
    with redis_server("--user", *rule, "--user", "default", "off") as url:
        userinfo = f"{quote(name, safe='')}:{quote(password, safe='')}"
        yield url.replace("redis://", f"redis://{userinfo}@")


@pytest.fixture(params=["unix", "tls", "password", "acl"])
def url(request: pytest.FixtureRequest) -> str:
    """The URL of the Redis over each transport, and with each kind of credentials."""
    return str(request.getfixturevalue(f"{request.param}_url"))


def direct(url: str, db: int = 0) -> redis.Redis:
    """A plain redis-py client, not the product's."""
    if url.startswith("unix://"):
        return redis.Redis(unix_socket_path=url.removeprefix("unix://"), db=db)
    return redis.Redis.from_url(url)


def run_one_job(api: Any) -> None:
    """A node registers, a job is submitted, polled, run and done, as an agent would."""
    register(api, "n1")
    job = submit(api, command="echo hello")
    polled = assert_json(api.get("/jobs", params={"node_id": "n1", "status": "pending"}))
    assert [j["job_id"] for j in polled] == [job["job_id"]]
    assert report(api, job["job_id"], "running").status_code == 200
    assert report(api, job["job_id"], "done", exit_code=0, stdout="hello").status_code == 200
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == "done"


@BOTH_FRONTS
def test_a_job_goes_from_submit_to_done_and_into_the_snapshot(
    url: str, prefix: str, make_client: ClientFactory, make_ctx: CtxFactory
) -> None:
    run_one_job(make_client(redis_url=url))
    # The restore at start (a blocking client, in a thread) marked this Redis as settled.
    assert direct(url).exists(Keys(prefix).initialised)
    ctx = make_ctx(redis_url=url)
    tasks.sweep(1)
    assert tasks.snapshot(1) == 1
    with sqlite3.connect(ctx.settings.scheduler_db) as db:
        assert list(db.execute("SELECT id, status FROM jobs")) == [("job-1", "done")]


def test_serve_and_a_worker_run_over_the_transport(url: str, prefix: str, tmp_path: Path) -> None:
    env = scheduler_env(url, prefix, SCHEDULER_DB=str(tmp_path / "snap.db"))
    fleet = Fleet(env, tmp_path)
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    try:
        fleet.start("api", "serve", "--host", "127.0.0.1", "--port", str(port))
        wait_http(f"{api}/health")
        assert httpx.post(f"{api}/nodes/register", json={"id": "n1"}).status_code == 201
        job_id = httpx.post(f"{api}/jobs", json={"command": "echo hi"}).json()["job_id"]
        for status in ("running", "done"):
            answer = httpx.patch(f"{api}/jobs/{job_id}", json={"status": status, "exit_code": 0})
            assert answer.status_code == 200, answer.text
    finally:
        fleet.stop_all()
    worker_burst(env)
    with sqlite3.connect(tmp_path / "snap.db") as db:
        assert list(db.execute("SELECT id, status FROM jobs")) == [(job_id, "done")]
    assert (tmp_path / "api.log").read_text().count("Traceback") == 0
    assert fleet.alive() == {"api": False}


# unix://


def test_both_kinds_of_client_reach_the_socket_and_its_db(
    unix_url: str, prefix: str, make_client: ClientFactory
) -> None:
    url = f"{unix_url}?db=3"
    client = sync_client(Settings.from_env({}, redis_url=url))
    try:
        client.set(f"{prefix}:probe", "on db 3")
    finally:
        client.close()
    assert direct(unix_url, db=3).get(f"{prefix}:probe") == b"on db 3"
    assert direct(unix_url, db=0).get(f"{prefix}:probe") is None
    api = make_client(redis_url=url)
    register(api, "n1")
    submit(api, command="echo hello")
    job_key = Keys(prefix).job("job-1")
    assert direct(unix_url, db=3).exists(job_key) and not direct(unix_url, db=0).exists(job_key)


def test_a_replica_on_a_socket_is_refused_as_not_the_primary_naming_the_socket(
    make_settings: SettingsFactory,
) -> None:
    with redis_server() as primary:
        port = primary.rsplit(":", 1)[1].split("/")[0]
        with redis_server("--replicaof", "127.0.0.1", port, unix_socket=True) as replica:
            store = SyncJobStore.connect(make_settings(redis_url=replica))
            try:
                socket = replica.removeprefix("unix://")  # on it before writing anything
                assert store.redis.config_get("unixsocket") == {"unixsocket": socket}
                with pytest.raises(NotPrimary, match=f"{replica.removeprefix('unix://')} is not"):
                    store.run(ops.upkeep.registry_unreadable())  # a DEL
            finally:
                store.close()


# rediss://


def without(url: str, *options: str) -> str:
    base, _, query = url.partition("?")
    kept = [pair for pair in query.split("&") if pair.split("=")[0] not in options]
    return f"{base}?{'&'.join(kept)}"


@pytest.mark.parametrize(
    "dropped",
    [("ssl_ca_certs",), ("ssl_certfile", "ssl_keyfile")],
    ids=["no CA: the server is not trusted", "no client certificate: Redis refuses"],
)
def test_tls_that_fails_is_a_503_from_the_api_and_a_connection_error_for_the_workers(
    tls_url: str, make_client: ClientFactory, make_settings: SettingsFactory, dropped: tuple[str]
) -> None:
    url = without(tls_url, *dropped)
    assert_refused(make_client(redis_url=url), make_settings(redis_url=url), redis.ConnectionError)


def assert_refused(api: Any, settings: Settings, error: type[redis.RedisError]) -> None:
    """The API answers a read and a poll 503 (never 500); a worker's client raises `error`."""
    assert_text_error(api.get("/jobs/job-1"), 503, "store unavailable")
    poll = api.get("/jobs", params={"node_id": "n1", "status": "pending"})
    assert_text_error(poll, 503, "store unavailable")
    client = sync_client(settings)
    try:
        with pytest.raises(error):
            client.ping()
    finally:
        client.close()


def mux_connects(url: str) -> bool:
    async def ping() -> bool:
        mux = MuxRedis(url, connect_timeout=5)
        try:
            return bool(await mux.execute("PING") == b"PONG")
        except redis.RedisError:
            return False
        finally:
            await mux.aclose()

    return asyncio.run(ping())


def redis_py_connects(url: str) -> bool:
    client = sync_client(Settings.from_env({}, redis_url=url))
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


# (what changes in the test server's full URL, whether a connection is made). Its
# certificate names 127.0.0.1 only, issued by the test CA; Redis asks for a client's.
TLS_CASES = [
    ("", True),
    ("no CA", False),
    ("no CA, ssl_cert_reqs=none", True),
    ("no CA, ssl_cert_reqs=optional", False),  # a certificate presented is still checked
    ("as localhost", False),  # not the name in the certificate
    ("as localhost, ssl_check_hostname=false", True),
    ("as localhost, ssl_cert_reqs=optional", False),  # the name is still checked
    ("as localhost, ssl_cert_reqs=none", True),
    ("no client certificate", False),
]


def tls_case(url: str, change: str) -> str:
    if "no CA" in change:
        url = without(url, "ssl_ca_certs")
    if "no client certificate" in change:
        url = without(url, "ssl_certfile", "ssl_keyfile")
    if "as localhost" in change:
        url = url.replace("127.0.0.1", "localhost")
    for option in change.split(", ")[1:] if "," in change else []:
        url += f"&{option}"
    return url


@pytest.mark.parametrize("change, connects", TLS_CASES, ids=[c or "as given" for c, _ in TLS_CASES])
def test_the_api_and_the_workers_read_each_tls_url_alike(
    tls_url: str, change: str, connects: bool
) -> None:
    url = tls_case(tls_url, change)
    assert (mux_connects(url), redis_py_connects(url)) == (connects, connects)


def test_ssl_cert_reqs_none_skips_verification_on_both_kinds_of_client(
    tls_url: str, make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    url = without(tls_url, "ssl_ca_certs") + "&ssl_cert_reqs=none"
    register(make_client(redis_url=url), "n1")
    client = sync_client(make_settings(redis_url=url))
    try:
        assert client.ping()
    finally:
        client.close()


# Credentials.


@pytest.fixture(scope="module")
def sentinel_url() -> Iterator[str]:
    """A primary, a replica and three sentinels, the servers and the sentinels each asking
    for their own password."""
    with sentinel_group(replicas=1, password=PASSWORD, sentinel_password="sentinel:pw@") as g:
        yield g.url


@BOTH_FRONTS
def test_a_sentinel_deployment_with_passwords_runs_a_job_end_to_end(
    sentinel_url: str, prefix: str, make_client: ClientFactory, make_ctx: CtxFactory
) -> None:
    run_one_job(make_client(redis_url=sentinel_url))
    make_ctx(redis_url=sentinel_url)
    tasks.sweep(1)
    assert tasks.snapshot(1) == 1


@pytest.mark.parametrize("wrong", ["password", "sentinel_password"])
def test_a_wrong_sentinel_or_server_password_is_a_503_and_a_worker_error(
    sentinel_url: str, make_client: ClientFactory, make_settings: SettingsFactory, wrong: str
) -> None:
    if wrong == "password":
        url = sentinel_url.replace(quote(PASSWORD, safe=""), "wrong", 1)
        error: type[redis.RedisError] = redis.AuthenticationError
    else:
        url = sentinel_url.rpartition("?")[0] + "?sentinel_password=wrong"
        error = redis.ConnectionError  # no sentinel answers: no primary to reach
    assert_refused(make_client(redis_url=url), make_settings(redis_url=url), error)


@pytest.mark.parametrize(
    "credentials",
    ["", ":wrong@", "nobody:x@"],
    ids=["none (NOAUTH)", "a wrong password", "an unknown user"],
)
def test_refused_credentials_are_a_503_from_the_api_and_an_error_for_the_workers(
    password_url: str,
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    credentials: str,
) -> None:
    url = "redis://" + credentials + password_url.rpartition("@")[2]
    api = make_client(redis_url=url)
    assert_refused(api, make_settings(redis_url=url), redis.AuthenticationError)

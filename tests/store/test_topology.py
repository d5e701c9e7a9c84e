"""Where Redis is (store/connection/: discovery, the mux and the blocking clients) and
REDIS_MIN_REPLICAS_ACKED: a node that is not the primary drops the connection as a lost one
(503, never 500), and every state change waits for its replicas in the same round trip."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socketserver
import threading
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import hiredis
import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from scheduler.config import Settings
from scheduler.models.access_key import ADMIN
from scheduler.models.job import STATUSES
from scheduler.store import ops
from scheduler.store.connection.blocking import sync_client
from scheduler.store.connection.discovery import TOPOLOGY_ERRORS, NotPrimary, slot_owner, tag_slot
from scheduler.store.connection.mux import MuxRedis
from scheduler.store.connection.protocol import FLUSH_COST, READ_COST, WRITE_COST
from scheduler.store.errors import JobNotFound, ReplicasNotAcked
from scheduler.store.jobs import JobStore
from scheduler.store.keys import Keys
from scheduler.store.scripts import SCRIPTS, listing
from scheduler.store.scripts import access as access_scripts
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts import logs as log_scripts
from scheduler.store.scripts import nodes as node_scripts
from scheduler.store.scripts import overview as overview_script
from scheduler.store.scripts import quotas as quota_scripts
from scheduler.store.scripts import schedules as schedule_scripts
from scheduler.store.scripts import series as series_scripts
from scheduler.store.scripts import services as service_scripts
from scheduler.store.scripts.listing import JobQuery, SearchQuery
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, assert_text_error, register, submit
from tests.fakes import eventually
from tests.redis_server import free_port, replicated_pair


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[str, str]]:
    with replicated_pair() as urls:
        yield urls


# A node that is not the primary.


def test_a_write_on_a_replica_drops_the_mux_connection_as_a_lost_one(
    pair: tuple[str, str], prefix: str
) -> None:
    _, replica = pair

    async def scenario() -> None:
        mux = MuxRedis(replica)
        assert await mux.execute("PING") == b"PONG"
        first = mux.protocol
        with pytest.raises(RedisConnectionError, match="READONLY"):
            await mux.execute("SET", f"{prefix}:k", "v")
        assert first is not None and first.lost
        assert await mux.execute("GET", f"{prefix}:k") is None  # the next call reconnects
        assert mux.protocol is not first
        await mux.aclose()

    run(scenario())


@pytest.mark.parametrize("reply", sorted(TOPOLOGY_ERRORS))
def test_every_topology_reply_drops_the_mux_connection(reply: str) -> None:
    served: list[int] = []

    async def moved(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(1)
        while await reader.read(1 << 16):
            writer.write(f"-{reply} 3999 127.0.0.1:1\r\n".encode())
            await writer.drain()

    async def scenario() -> None:
        server = await asyncio.start_server(moved, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        mux = MuxRedis(f"redis://127.0.0.1:{port}/0")
        for _ in range(2):
            with pytest.raises(RedisConnectionError, match=reply):
                await mux.execute("GET", "k")
        assert mux.protocol is not None and mux.protocol.lost
        assert len(served) == 2  # each call after the error connected afresh
        await mux.aclose()
        server.close()

    run(scenario())


def test_other_errors_keep_the_connection(redis_url: str, prefix: str) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        await mux.execute("SET", f"{prefix}:s", "text")
        with pytest.raises(ResponseError) as raised:
            await mux.execute("INCR", f"{prefix}:s")
        assert not isinstance(raised.value, RedisConnectionError)
        assert mux.protocol is not None and not mux.protocol.lost
        await mux.aclose()

    run(scenario())


def test_the_blocking_client_turns_a_replica_into_a_connection_error(
    pair: tuple[str, str], make_settings: SettingsFactory
) -> None:
    _, replica = pair
    store = SyncJobStore.connect(make_settings(redis_url=replica))
    with pytest.raises(NotPrimary):
        store.run(ops.upkeep.registry_unreadable())  # a DEL
    store.close()


def test_the_api_answers_503_on_a_replica_never_500(
    pair: tuple[str, str], make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    primary, replica = pair
    settings = make_settings(redis_url=primary)
    register(make_client(settings), "n1")  # the restore marker and a node, replicated
    copy = redis.Redis.from_url(replica)
    eventually(lambda: copy.hexists(Keys(settings.redis_prefix).nodes, "n1"))
    client = make_client(redis_url=replica)
    response = client.post("/jobs", json={"command": "echo hi"})
    assert_text_error(response, 503, "store unavailable")


def test_the_cluster_slot_is_the_tag_s_and_its_owner_comes_from_cluster_slots() -> None:
    slot = tag_slot("sched")
    assert slot == redis.crc.key_slot(b"{sched}:job:job-1")  # any key under the tag
    reply: list[Any] = [
        [0, slot - 1, [b"10.0.0.1", 7000, b"a"]],
        [slot, slot, [b"", 7001, b"b"], [b"10.0.0.9", 7009, b"r"]],
    ]
    assert slot_owner(reply, slot, "seed-host") == ("seed-host", 7001)  # "" = the seed
    assert slot_owner(reply, slot - 1, "seed-host") == ("10.0.0.1", 7000)
    assert slot_owner(reply[:1], slot, "seed-host") is None


# REDIS_MIN_REPLICAS_ACKED.


def _acked(make_settings: SettingsFactory, url: str, replicas: int) -> Settings:
    return make_settings(
        redis_url=url, redis_min_replicas_acked=replicas, redis_replicas_ack_timeout_ms=200
    )


def test_a_write_waits_for_the_replica_and_succeeds(
    pair: tuple[str, str], make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    primary, replica = pair
    client = make_client(_acked(make_settings, primary, 1))
    register(client, "n1")
    job = submit(client, command="echo hi")
    # Acknowledged means on the replica already.
    settings = make_settings(redis_url=replica)
    assert redis.Redis.from_url(replica).exists(Keys(settings.redis_prefix).job(job["job_id"]))


def test_too_few_replicas_is_503_saying_the_change_may_have_been_applied(
    pair: tuple[str, str], make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    primary, _ = pair
    client = make_client(_acked(make_settings, primary, 2))
    body = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_text_error(
        client.post("/nodes/register", json=body),
        503,
        "store unavailable: 1 of 2 replicas acknowledged the change in time"
        " (REDIS_MIN_REPLICAS_ACKED); it may have been applied",
    )
    # Reads do not wait: the listing answers.
    assert client.get("/jobs").status_code == 200


def test_the_blocking_store_waits_too(
    pair: tuple[str, str], make_settings: SettingsFactory
) -> None:
    primary, _ = pair
    ok = SyncJobStore.connect(_acked(make_settings, primary, 1))
    assert ok.run(ops.upkeep.finish_cancels(now=1.0)) == []
    strict = SyncJobStore.connect(_acked(make_settings, primary, 2))
    with pytest.raises(ReplicasNotAcked):
        strict.run(ops.upkeep.finish_cancels(now=1.0))
    ok.close()
    strict.close()


@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_the_noscript_fallback_still_waits(
    pair: tuple[str, str], make_settings: SettingsFactory, flavour: str
) -> None:
    primary, _ = pair
    settings = _acked(make_settings, primary, 2)
    call = job_scripts.cancel_job("job-1", 1.0)
    redis.Redis.from_url(primary).function_flush()
    if flavour == "sync":
        store = SyncJobStore.connect(settings)
        with pytest.raises(ReplicasNotAcked):
            store.run(call)
        store.close()
        return

    async def scenario() -> None:
        store = JobStore.connect(settings)
        with pytest.raises(ReplicasNotAcked):
            await store.run(call)
        await store.aclose()

    run(scenario())


def test_concurrent_writes_share_one_wait_per_batch(
    pair: tuple[str, str], make_settings: SettingsFactory
) -> None:
    primary, _ = pair
    settings = _acked(make_settings, primary, 1)
    admin = redis.Redis.from_url(primary)

    def waits() -> int:
        stats = admin.info("commandstats").get("cmdstat_wait", {"calls": 0})
        return int(stats["calls"])

    async def scenario() -> None:
        store = JobStore.connect(settings)
        with pytest.raises(JobNotFound):  # connected, the script loaded
            await store.run(ops.jobs.cancel("job-0", 1.0))
        before = waits()
        cancels = (store.run(ops.jobs.cancel(f"job-{i}", 1.0)) for i in range(40))
        answers = await asyncio.gather(*cancels, return_exceptions=True)
        assert all(isinstance(a, JobNotFound) for a in answers), answers
        sent = waits() - before
        # One WAIT per write of the batch, at most (a write leaves with FLUSH_COST's worth);
        # each cancel sends its script and a read of the job's other parts (store._changed).
        assert 1 <= sent <= math.ceil(40 * (WRITE_COST + READ_COST) / FLUSH_COST)
        await store.aclose()

    run(scenario())


def test_the_read_only_scripts_only_read(rclient: redis.Redis, store: SyncJobStore) -> None:
    """Each script marked read_only runs under Redis' own no-writes check (a write in it would
    fail), with the state its writes would need: nodes, jobs pending, running, cancelling,
    and services."""
    keys = store.keys
    settings = store.settings
    calls = [
        listing.list_jobs(JobQuery("", "", 0, 100), 1 << 20),
        listing.list_jobs(JobQuery("n1", "pending", 0, 100, newest=True), 1 << 20),
        listing.list_jobs(JobQuery("n1", "", 0, 100), 1 << 20),
        listing.list_jobs(JobQuery("", "running", 0, 100), 1 << 20),
        listing.list_jobs(JobQuery("", "pending", 0, 100, ("", "a"), True), 1 << 20),
        listing.list_jobs(JobQuery("", "", 0, 100, ("a",)), 1 << 20, "s"),
        job_scripts.check_report("job-1", "open"),
        listing.attempts("job-1"),
        listing.queue_place("job-1"),
        log_scripts.read_log("job-1", "", 1 << 20),
        log_scripts.read_log("job-1", "0-1", 10),
        listing.search(SearchQuery(JobQuery("", "", 0, 51), "echo", 5000), 1 << 20),
        listing.search(SearchQuery(JobQuery("n1", "pending", 2, 5), "x", 10), 1 << 20),
        listing.counts("", STATUSES),
        listing.counts("n1", STATUSES),
        listing.counts("", STATUSES, ("", "a")),
        listing.search(SearchQuery(JobQuery("", "", 0, 51, ("a",)), "echo", 5000), 1 << 20),
        listing.namespace_counts(STATUSES),
        listing.namespace_counts(STATUSES, ("", "a")),
        overview_script.counts(STATUSES),
        overview_script.node_loads("seen", "0"),
        overview_script.node_loads("compute", "0"),
        node_scripts.registered("n1", True),
        node_scripts.registered("n1", False),
        node_scripts.node_caller("n1", "key"),
        series_scripts.read_series(29_453_760, 1440),
        service_scripts.list_services("", "", "open"),
        service_scripts.list_services("n1", "", "open"),
        schedule_scripts.due_schedules(2**40, 0, 100),
        schedule_scripts.list_schedules("", 100),
        schedule_scripts.list_schedules("a", 100),
        access_scripts.session_alive("0" * 64),  # _populate's session: a value, not nil
        access_scripts.keyring(-1),
        access_scripts.keyring(0),
        access_scripts.read_audit(10),
        quota_scripts.namespaces(),
    ]
    read_only = {name for name, script in SCRIPTS.items() if script.read_only}
    assert {call.script.name for call in calls} == read_only
    assert len(read_only) < len(SCRIPTS)
    _populate(store, settings)
    for call in calls:
        text = "#!lua flags=no-writes\n" + call.script.text
        assert rclient.eval(text, 1, keys.root, *call.args) is not None


def _populate(store: SyncJobStore, settings: Settings) -> None:
    from starlette.testclient import TestClient

    from scheduler.api.app import create_app

    with TestClient(create_app(settings)) as client:
        register(client, "n1")
        for _ in range(3):
            submit(client, command="echo hi")
        assert client.patch("/jobs/job-1", json={"status": "running"}).status_code == 200
        assert client.delete("/jobs/job-2").status_code in (200, 202)
        service = {"node_id": "n1", "name": "web", "port": 8080}
        client.post("/services", json=service)
        schedule = {"name": "s", "every_secs": 1, "job": {"command": "x"}}
        assert client.post("/schedules", json=schedule).status_code == 201
    store.run(access_scripts.start_session("0" * 64, 60, ADMIN))


def test_a_missing_replica_count_is_a_config_error(tmp_path: Path) -> None:
    from scheduler.config import ConfigError

    with pytest.raises(ConfigError, match="REDIS_MIN_REPLICAS_ACKED"):
        Settings.from_env({"REDIS_MIN_REPLICAS_ACKED": "-1"})
    with pytest.raises(ConfigError, match="REDIS_REPLICAS_ACK_TIMEOUT_MS"):
        Settings.from_env({"REDIS_REPLICAS_ACK_TIMEOUT_MS": "0"})


def _fake_sentinel(names: str) -> Any:
    """A sentinel that names the node at `names` (host:port) as the primary of any service."""
    host, port = names.split(":")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(1 << 16):
            writer.write(f"*2\r\n${len(host)}\r\n{host}\r\n${len(port)}\r\n{port}\r\n".encode())
            await writer.drain()

    return answer


@pytest.mark.parametrize("named", ["primary", "replica"])
def test_the_mux_connects_only_to_a_node_that_says_it_is_the_primary(
    pair: tuple[str, str], named: str
) -> None:
    # The sentinels may name a demoted primary for a moment: ROLE is asked on each connect.
    url = pair[0] if named == "primary" else pair[1]
    address = url.removeprefix("redis://").removesuffix("/0")

    async def scenario() -> None:
        sentinel = await asyncio.start_server(_fake_sentinel(address), "127.0.0.1", 0)
        port = sentinel.sockets[0].getsockname()[1]
        dead = f"127.0.0.1:{free_port()}"  # asked first, skipped
        mux = MuxRedis(f"redis+sentinel://{dead},127.0.0.1:{port}/svc/0")
        if named == "primary":
            assert await mux.execute("PING") == b"PONG"
        else:
            with pytest.raises(NotPrimary, match="slave, not the primary"):
                await mux.execute("PING")
        await mux.aclose()
        sentinel.close()

    run(scenario())


@contextlib.contextmanager
def blocking_fake_sentinel(names: str) -> Iterator[int]:
    """`_fake_sentinel` for blocking clients: a thread answering every command with the
    address `names` (host:port). Yields its port."""
    host, port = names.split(":")
    address = f"*2\r\n${len(host)}\r\n{host}\r\n${len(port)}\r\n{port}\r\n".encode()

    class Answer(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            # redis-py also says HELLO (RESP3) and CLIENT SETINFO on connect.
            commands = hiredis.Reader()
            while data := self.request.recv(1 << 16):
                commands.feed(data)
                while (command := commands.gets()) is not False:
                    name = command[0].upper()
                    hello = b"%1\r\n+proto\r\n:3\r\n"
                    answer = address if name == b"SENTINEL" else b"+OK\r\n"
                    self.request.sendall(hello if name == b"HELLO" else answer)

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Answer) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()


@pytest.mark.parametrize("named", ["primary", "replica"])
def test_the_blocking_client_connects_only_to_a_node_that_says_it_is_the_primary(
    pair: tuple[str, str], named: str, make_settings: SettingsFactory
) -> None:
    """As the mux: the workers' and the CLI's connections ask ROLE after the sentinels."""
    url = pair[0] if named == "primary" else pair[1]
    address = url.removeprefix("redis://").removesuffix("/0")
    with blocking_fake_sentinel(address) as port:
        dead = f"127.0.0.1:{free_port()}"  # asked first, skipped
        settings = make_settings(redis_url=f"redis+sentinel://{dead},127.0.0.1:{port}/svc/0")
        client = sync_client(settings)
        try:
            if named == "primary":
                assert client.ping() is True
            else:
                with pytest.raises(NotPrimary, match="slave, not the primary"):
                    client.ping()
        finally:
            client.close()

"""Issue 14, item 2, the connection half: with REDIS_URL=redis+cluster://seeds, the API's
multiplexed connection, the blocking clients and the notifier talk to the primary owning the
deployment's hash-tag slot, on a real three-primary cluster (tests/redis_cluster.py); a slot
that moves is followed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from scheduler.config import Settings
from scheduler.store.connection.blocking import sync_client
from scheduler.store.connection.discovery import NotPrimary, tag_slot
from scheduler.store.connection.mux import MuxRedis
from scheduler.store.connection.notify import Notifier
from scheduler.store.keys import Keys
from tests.redis_cluster import Cluster, ClusterNode, redis_cluster
from tests.redis_server import free_port


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with redis_cluster() as started:
        yield started


def prefixes_on_every_node(cluster: Cluster) -> dict[ClusterNode, str]:
    """node -> a prefix whose slot that node serves."""
    found: dict[ClusterNode, str] = {}
    i = 0
    while len(found) < len(cluster.nodes):
        prefix = f"c{i}"
        found.setdefault(cluster.owner(tag_slot(prefix)), prefix)
        i += 1
    return found


def settings_for(cluster: Cluster, prefix: str, **extra: Any) -> Settings:
    return Settings.from_env({}, redis_url=cluster.url, redis_prefix=prefix, **extra)


def test_the_mux_talks_to_the_owner_of_the_prefix_slot_on_every_node(cluster: Cluster) -> None:
    async def scenario() -> None:
        for node, prefix in prefixes_on_every_node(cluster).items():
            mux = MuxRedis(cluster.url, prefix=prefix)
            assert await mux.execute("SET", f"{{{prefix}}}:job:job-1", "x") == b"OK"
            assert await mux.execute("INCR", f"{{{prefix}}}:seq:job") == 1
            await mux.aclose()
            assert node.client().get(f"{{{prefix}}}:job:job-1") == b"x"

    run(scenario())


def test_the_blocking_client_does_multi_exec_on_the_owner(cluster: Cluster) -> None:
    # rq's pipelines are MULTI/EXEC over several keys: fine when they share the slot.
    for node, prefix in prefixes_on_every_node(cluster).items():
        client = sync_client(settings_for(cluster, prefix))
        pipe = client.pipeline(transaction=True)
        pipe.set(f"{{{prefix}}}:rq:job:1", "a")
        pipe.rpush(f"{{{prefix}}}:rq:queue:events", "1")
        assert pipe.execute() == [True, 1]
        client.close()
        assert node.client().lrange(f"{{{prefix}}}:rq:queue:events", 0, -1) == [b"1"]


def test_a_dead_seed_is_skipped(cluster: Cluster) -> None:
    prefix = "dead-seed"
    url = f"redis+cluster://127.0.0.1:{free_port()},{cluster.nodes[1].address}"

    async def scenario() -> None:
        mux = MuxRedis(url, prefix=prefix)
        assert await mux.execute("PING") == b"PONG"
        await mux.aclose()

    run(scenario())
    client = sync_client(Settings.from_env({}, redis_url=url, redis_prefix=prefix))
    assert client.ping()
    client.close()


def test_a_moved_slot_drops_the_connection_and_the_next_call_follows_it(
    cluster: Cluster,
) -> None:
    prefix = "moving"
    slot = tag_slot(prefix)
    key = f"{{{prefix}}}:job:job-1"
    blocking = sync_client(settings_for(cluster, prefix))

    async def scenario() -> None:
        mux = MuxRedis(cluster.url, prefix=prefix)
        assert await mux.execute("SET", key, "kept") == b"OK"
        assert blocking.get(key) == b"kept"  # connected to the owner, as the mux
        before = cluster.owner(slot)
        cluster.move_slot(slot, next(node for node in cluster.nodes if node != before))
        # MOVED: the same error as a lost connection (the API's 503), never a 500 ...
        with pytest.raises(RedisConnectionError, match="MOVED"):
            await mux.execute("GET", key)
        # ... and the next call connects where the MOVED said, the new owner, whatever the
        # seeds' views of the slot say meanwhile (under load they lagged for over 60 s: the
        # mux asked them again and again, and was sent back to the old owner each time).
        assert await mux.execute("GET", key) == b"kept"
        await mux.aclose()

    run(scenario())
    # The blocking client the same way (the workers retry a ConnectionError).
    with pytest.raises(NotPrimary, match="MOVED"):
        blocking.get(key)
    assert blocking.get(key) == b"kept"
    blocking.close()


def test_a_moved_slot_is_followed_where_the_moved_says_even_when_the_seeds_lag(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seeds' views of a moved slot can lag behind it (for over 60 s under load, once in
    CI): asked again, they named the old owner, which answered MOVED again, and again. The
    next connection goes where the MOVED said, whatever the seeds say."""
    prefix = "lagging"
    slot = tag_slot(prefix)
    key = f"{{{prefix}}}:job:job-1"
    before = cluster.owner(slot)

    async def stale(target: Any, prefix: str) -> tuple[str, int]:
        return "127.0.0.1", before.port  # seeds that still name the old owner

    async def scenario() -> None:
        mux = MuxRedis(cluster.url, prefix=prefix)
        assert await mux.execute("SET", key, "kept") == b"OK"
        cluster.move_slot(slot, next(node for node in cluster.nodes if node != before))
        monkeypatch.setattr("scheduler.store.connection.mux._locate", stale)
        with pytest.raises(NotPrimary, match="MOVED"):
            await mux.execute("GET", key)
        assert await mux.execute("GET", key) == b"kept"
        await mux.aclose()

    run(scenario())


def test_the_notifier_hears_a_publish_made_on_another_node(cluster: Cluster) -> None:
    # PUBLISH on a cluster reaches every node: the scripts publish on the slot's owner, the
    # notifier subscribes there too; here the publish comes from elsewhere.
    prefix = "notify"
    home = cluster.owner(tag_slot(prefix))
    elsewhere = next(node for node in cluster.nodes if node != home).client()
    channel = Keys(prefix).node_channel("n1")

    async def scenario() -> None:
        notifier = Notifier(cluster.url, prefix)
        async with notifier.watch(channel) as watch:
            elsewhere.publish(channel, "")
            await watch.wait(5)
            assert watch.event.is_set() and not watch.lost
        await notifier.aclose()

    run(scenario())

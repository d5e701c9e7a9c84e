"""Issue 14, item 2, the connection half: with REDIS_URL=redis+cluster://seeds, the API's
multiplexed connection, the blocking clients and the notifier talk to the primary owning the
deployment's hash-tag slot, on a real three-primary cluster; a slot that moves is followed.

(The keys carry the tag `{REDIS_PREFIX}` once keys.py does; these tests write tagged keys
themselves.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from scheduler.config import Settings
from scheduler.store.notify import Notifier
from scheduler.store.redis_mux import MuxRedis
from scheduler.store.topology import NotPrimary, sync_client, tag_slot
from tests.redis_server import free_port, redis_cluster


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[str]]:
    with redis_cluster() as urls:
        yield urls


def _address(url: str) -> str:
    return url.removeprefix("redis://").removesuffix("/0")


def cluster_url(nodes: list[str]) -> str:
    return "redis+cluster://" + ",".join(_address(url) for url in nodes)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def owner(nodes: list[str], slot: int) -> str:
    """The URL of the node serving `slot`, as the cluster itself says."""
    for entry in redis.Redis.from_url(nodes[0]).execute_command("CLUSTER SLOTS"):  # type: ignore[no-untyped-call]
        if entry[0] <= slot <= entry[1]:
            return f"redis://{_text(entry[2][0])}:{entry[2][1]}/0"
    raise AssertionError(f"slot {slot} is not served")


def prefixes_on_every_node(nodes: list[str]) -> dict[str, str]:
    """node URL -> a prefix whose slot that node serves."""
    found: dict[str, str] = {}
    i = 0
    while len(found) < len(nodes):
        prefix = f"c{i}"
        found.setdefault(owner(nodes, tag_slot(prefix)), prefix)
        i += 1
    return found


def move_slot(nodes: list[str], slot: int, to: str) -> None:
    """Migrate `slot` with its keys to node `to`, as redis-cli --cluster reshard does."""
    source = redis.Redis.from_url(owner(nodes, slot))
    target = redis.Redis.from_url(to)
    source_id = _text(source.execute_command("CLUSTER MYID"))  # type: ignore[no-untyped-call]
    target_id = _text(target.execute_command("CLUSTER MYID"))  # type: ignore[no-untyped-call]
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)  # type: ignore[no-untyped-call]
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)  # type: ignore[no-untyped-call]
    keys = source.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)  # type: ignore[no-untyped-call]
    if keys:
        host, port = _address(to).split(":")
        source.execute_command("MIGRATE", host, port, "", 0, 5000, "KEYS", *keys)  # type: ignore[no-untyped-call]
    for url in nodes:
        redis.Redis.from_url(url).execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)  # type: ignore[no-untyped-call]


def settings_for(nodes: list[str], prefix: str, **extra: Any) -> Settings:
    return Settings.from_env({}, redis_url=cluster_url(nodes), redis_prefix=prefix, **extra)


def test_the_mux_talks_to_the_owner_of_the_prefix_slot_on_every_node(nodes: list[str]) -> None:
    async def scenario() -> None:
        for node, prefix in prefixes_on_every_node(nodes).items():
            mux = MuxRedis(cluster_url(nodes), prefix=prefix)
            assert await mux.execute("SET", f"{{{prefix}}}:job:job-1", "x") == b"OK"
            assert await mux.execute("INCR", f"{{{prefix}}}:seq:job") == 1
            await mux.aclose()
            assert redis.Redis.from_url(node).get(f"{{{prefix}}}:job:job-1") == b"x"

    run(scenario())


def test_the_blocking_client_does_multi_exec_on_the_owner(nodes: list[str]) -> None:
    # rq's pipelines are MULTI/EXEC over several keys: fine when they share the slot.
    for node, prefix in prefixes_on_every_node(nodes).items():
        client = sync_client(settings_for(nodes, prefix))
        pipe = client.pipeline(transaction=True)
        pipe.set(f"rq:job:{{{prefix}}}:1", "a")
        pipe.rpush(f"rq:queue:{{{prefix}}}:events", "1")
        assert pipe.execute() == [True, 1]
        client.close()
        assert redis.Redis.from_url(node).lrange(f"rq:queue:{{{prefix}}}:events", 0, -1) == [b"1"]


def test_a_dead_seed_is_skipped(nodes: list[str]) -> None:
    prefix = "dead-seed"
    url = f"redis+cluster://127.0.0.1:{free_port()}," + _address(nodes[1])

    async def scenario() -> None:
        mux = MuxRedis(url, prefix=prefix)
        assert await mux.execute("PING") == b"PONG"
        await mux.aclose()

    run(scenario())
    client = sync_client(Settings.from_env({}, redis_url=url, redis_prefix=prefix))
    assert client.ping()
    client.close()


def test_a_moved_slot_drops_the_connection_and_the_next_call_follows_it(
    nodes: list[str],
) -> None:
    prefix = "moving"
    slot = tag_slot(prefix)
    key = f"{{{prefix}}}:job:job-1"
    blocking = sync_client(settings_for(nodes, prefix))

    async def scenario() -> None:
        mux = MuxRedis(cluster_url(nodes), prefix=prefix)
        assert await mux.execute("SET", key, "kept") == b"OK"
        assert blocking.get(key) == b"kept"  # connected to the owner, as the mux
        before = owner(nodes, slot)
        move_slot(nodes, slot, next(url for url in nodes if url != before))
        # MOVED: the same error as a lost connection (the API's 503), never a 500 ...
        with pytest.raises(RedisConnectionError, match="MOVED"):
            await mux.execute("GET", key)
        # ... and the next call connects to the new owner.
        assert await mux.execute("GET", key) == b"kept"
        await mux.aclose()

    run(scenario())
    # The blocking client the same way (the workers retry a ConnectionError).
    with pytest.raises(NotPrimary, match="MOVED"):
        blocking.get(key)
    assert blocking.get(key) == b"kept"
    blocking.close()


def test_the_notifier_hears_a_publish_made_on_another_node(nodes: list[str]) -> None:
    # PUBLISH on a cluster reaches every node: the scripts publish on the slot's owner, the
    # notifier subscribes there too; here the publish comes from elsewhere.
    prefix = "notify"
    home = owner(nodes, tag_slot(prefix))
    elsewhere = redis.Redis.from_url(next(url for url in nodes if url != home))

    async def scenario() -> None:
        notifier = Notifier(cluster_url(nodes), prefix)
        async with notifier.watch(f"{{{prefix}}}:wake:node:n1") as watch:
            elsewhere.publish(f"{{{prefix}}}:wake:node:n1", "")
            await watch.wait(5)
            assert watch.event.is_set() and not watch.lost
        await notifier.aclose()

    run(scenario())

"""Store operations declared once (store/operation.py, store/ops/) and their executors: the
blocking one (SyncJobStore) and the asyncio one (JobStore), over one shard or three, run the
same declaration to the same value, route it by its declaration, and let a program handle a
step's error. A second declaration of an operation fails at import; no store class holds an
operation's method of its own."""

from __future__ import annotations

import asyncio
import inspect
import json
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scheduler.config import Settings
from scheduler.models.job import JobCreate, new_job
from scheduler.nodes.placement import Placement
from scheduler.store import ops
from scheduler.store.jobs import JobStore
from scheduler.store.operation import (
    OPERATIONS,
    Each,
    Home,
    OfJob,
    OfNode,
    Op,
    Shard,
    Steps,
    by_job,
    each,
    home,
    operation,
    send,
)
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.shards import node_shard
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import SettingsFactory


def test_an_operation_declared_twice_fails_at_its_declaration() -> None:
    def twice(shard: Shard) -> Steps[int]:
        return 1
        yield

    twice.__module__ = "scheduler.store.ops.jobs"
    twice.__name__ = "cancel"  # jobs.cancel is declared already
    with pytest.raises(ValueError, match=r"jobs\.cancel is declared twice"):
        operation(home)(twice)


def test_every_operation_is_named_once_across_the_ops_modules() -> None:
    public = [
        name.split(".", 1)[1] for name in OPERATIONS if not name.split(".", 1)[1].startswith("_")
    ]
    assert len(public) == len(set(public)), sorted(n for n in public if public.count(n) > 1)
    modules = {m.name for m in pkgutil.iter_modules(ops.__path__)}
    assert {name.split(".")[0] for name in OPERATIONS} >= modules


# The executors' own methods: a store operation is never one of them (it is declared in
# store/ops/ and run through `run`).
EXECUTOR_METHODS = {
    JobStore: {"run", "on_shard", "shard_of", "start", "aclose", "connect", "notifiers"}
    | {"send_poll", "send_get", "poll_wait", "get_wait", "client_of_job"},
    SyncJobStore: {"run", "call", "close", "connect"},
}


@pytest.mark.parametrize("store_class", [JobStore, SyncJobStore])
def test_no_store_class_holds_an_operation_of_its_own(store_class: type) -> None:
    methods = {
        name
        for name, _ in inspect.getmembers(store_class)
        if not name.startswith("_") and name not in ("redis", "keys", "settings")
    }
    assert methods == EXECUTOR_METHODS[store_class]
    operations = {name.split(".", 1)[1] for name in OPERATIONS}
    assert not methods & operations


# A table of routes: each operation answers which shard it ran on, as an executor routes it.


@operation(home)
def _where_home(shard: Shard) -> Steps[int]:
    yield from send("PING")
    return shard.index


@operation(by_job)
def _where_job(shard: Shard, job_id: str) -> Steps[int]:
    yield from send("PING")
    return shard.index


@operation(each(lambda found: sorted(found)))
def _where_each(shard: Shard) -> Steps[int]:
    yield from send("PING")
    return shard.index


@operation(home)
def _handles_an_error(shard: Shard) -> Steps[str]:
    try:
        yield from send("NOT-A-COMMAND")
    except redis.ResponseError:  # what both executors' connections raise
        return "handled"
    return "not raised"


def test_the_blocking_executor_runs_every_route_on_its_shard(
    make_settings: SettingsFactory,
) -> None:
    store = SyncJobStore.connect(make_settings())
    try:
        assert store.run(_where_home()) == 0
        assert store.run(_where_job("job-7")) == 0
        assert store.run(_where_each()) == 0  # one shard's value, no merge
        assert store.run(_handles_an_error()) == "handled"
    finally:
        store.close()


@pytest.fixture
def three_shards(make_settings: SettingsFactory) -> Iterator[Settings]:
    settings = make_settings(shards=3)
    for k in range(3):
        shard = SyncJobStore.connect(settings.for_shard(k))
        try:
            # Each shard settled its restore question, as a starting serve or worker does.
            shard.run(snapshot_scripts.finish_restore(0, "test"))
        finally:
            shard.close()
    yield settings


def test_the_asyncio_executor_routes_by_the_declaration(three_shards: Settings) -> None:
    async def routed() -> list[Any]:
        store = JobStore.connect(three_shards)
        try:
            await store.start()
            jobs = [await store.run(_where_job(f"job-{n}")) for n in (3, 4, 5)]
            node = await store.run(Op(OfNode("n1"), _where_home().program))
            return [await store.run(_where_home()), jobs, await store.run(_where_each()), node]
        finally:
            await store.aclose()

    home_shard, jobs, every, node = asyncio.run(routed())
    assert home_shard == 0
    assert jobs == [0, 1, 2]  # job-N is shard N mod 3's
    assert every == [0, 1, 2]
    assert node == node_shard("n1", 3)


def test_one_declaration_makes_a_job_in_either_executor(make_settings: SettingsFactory) -> None:
    """ops.jobs.create, run by the workers' store and by the API's, makes the same job."""
    settings = make_settings()
    blocking = SyncJobStore.connect(settings)
    blocking.run(snapshot_scripts.finish_restore(0, "test"))
    job = new_job(JobCreate(command="echo one"))
    try:
        made = blocking.run(ops.jobs.create(job, Placement.fixed("n1"), 1.0))

        async def other() -> Any:
            store = JobStore.connect(settings)
            try:
                return await store.run(ops.jobs.create(job, Placement.fixed("n1"), 1.0))
            finally:
                await store.aclose()

        second = asyncio.run(other())
        made_ids = [json.loads(created.job)["job_id"] for created in (made, second)]
        assert made_ids == ["job-1", "job-2"]
        assert blocking.run(ops.jobs.get("job-1")) is not None
        assert blocking.run(ops.jobs.get("job-2")) is not None
    finally:
        blocking.close()


def test_the_routes_of_a_declaration_are_its_arguments() -> None:
    assert ops.jobs.cancel("job-3", 1.0).route == OfJob("job-3")
    assert ops.nodes.heartbeat("n1", 1.0, "key").route == OfNode("n1")
    assert ops.schedules.schedule("daily").route == Home()
    assert isinstance(ops.listings.counts("").route, Each)

"""A bulk create (ops.jobs.create_many): each job made by its own create script, as `create`
makes one, every job of a shard sent in one round trip (driving.in_step) by either executor;
a job's failure is its own; a Redis that forgot the scripts loads them once for the batch."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scheduler.config import Settings
from scheduler.models.job import Job, JobCreate, new_job, stamped
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store import ops
from scheduler.store.connection.mux import MuxRedis
from scheduler.store.driving import in_step
from scheduler.store.errors import IdempotencyMismatch
from scheduler.store.jobs import JobStore
from scheduler.store.operation import (
    Command,
    Home,
    Op,
    Shard,
    Steps,
    Together,
    home,
    nested,
    operation,
)
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.scripts.create import Created
from scheduler.store.scripts.jobs import NO_DEDUP, Dedup
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import SettingsFactory

NOW = 1_700_000_000.0


def job(command: str, **fields: Any) -> Job:
    request = JobCreate(command=command, **fields)
    return stamped(new_job(request), request, NOW)


def ids(values: list[Any]) -> list[str]:
    return [
        json.loads(v.job)["job_id"] if isinstance(v, Created) else type(v).__name__ for v in values
    ]


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Iterator[Settings]:
    settings = make_settings()
    store = SyncJobStore.connect(settings)
    try:
        store.run(snapshot_scripts.finish_restore(0, "test"))  # the restore question answered
    finally:
        store.close()
    yield settings


def mixed() -> list[tuple[Job, Placement, Dedup]]:
    """Two jobs made, one running after a job that is not, one no node takes, one keyed."""
    fixed, live = Placement.fixed("n1"), Placement.live()
    return [
        (job("echo 1"), fixed, NO_DEDUP),
        (job("later", after=["job-99"]), fixed, NO_DEDUP),
        (job("nowhere"), live, NO_DEDUP),  # no compute node is live
        (job("echo 2", env_vars={"BIG": "x" * 5000}), fixed, Dedup("submit", "k1", 60, "f1")),
    ]


def test_the_blocking_store_makes_a_batch_in_one_round_trip(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SyncJobStore.connect(settings)
    pipelines: list[int] = []
    piped = SyncJobStore._piped

    def counted(self: SyncJobStore, steps: Any) -> list[Any]:
        pipelines.append(len(steps))
        return piped(self, steps)

    monkeypatch.setattr(SyncJobStore, "_piped", counted)
    try:
        made = store.run(ops.jobs.create_many(mixed(), NOW))
        # The keyed job's spec is staged apart (its env_vars are large): a SET beside it.
        assert pipelines == [5]
        assert ids(made) == ["job-1", "InvalidInput", "NoHealthyNodes", "job-2"]
        assert str(made[1]) == "invalid after: job-99 is not a job"
        again = store.run(ops.jobs.create_many(mixed()[3:], NOW))  # a replay of the key
        assert ids(again) == ["job-2"] and again[0].duplicate
        assert json.loads(again[0].job)["env_vars"]["BIG"] == "x" * 5000  # its parts apart read
        other = (job("echo 3"), Placement.fixed("n1"), Dedup("submit", "k1", 60, "f2"))
        assert isinstance(store.run(ops.jobs.create_many([other], NOW))[0], IdempotencyMismatch)
    finally:
        store.close()


def test_the_asyncio_store_makes_a_batch_in_one_round_trip(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps: list[Any] = []
    step = JobStore._step

    async def counted(self: JobStore, shard: Any, sent: Any) -> Any:
        steps.append(sent)
        return await step(self, shard, sent)

    monkeypatch.setattr(JobStore, "_step", counted)

    async def made() -> list[Any]:
        store = JobStore.connect(settings)
        try:
            return await store.run(ops.jobs.create_many(mixed(), NOW))
        finally:
            await store.aclose()

    values = asyncio.run(made())
    assert ids(values) == ["job-1", "InvalidInput", "NoHealthyNodes", "job-2"]
    assert [type(s).__name__ for s in steps] == ["Together"]
    assert len(steps[0].steps) == 5 and steps[0].tolerant


@operation(home)
def _two_steps(shard: Shard, key: str) -> Steps[str]:
    first = yield from run_command("SET", key, "1")
    second = yield from run_command("GET", key)
    return f"{first!r} {second!r}"


def run_command(*args: Any) -> Steps[Any]:
    return (yield Command(args))


@operation(home)
def _fails(shard: Shard) -> Steps[str]:
    yield Command(("NOT-A-COMMAND",))
    return "not raised"


@operation(home)
def _nested(shard: Shard) -> Steps[Any]:
    return (yield from nested(ops.jobs.get("job-1")))


def test_programs_in_step_fail_alone_and_take_rounds_not_turns(
    settings: Settings, prefix: str
) -> None:
    """Three programs of two, one and one steps: two round trips; the failing one's error is
    its value, the others go on."""
    programs = [_two_steps(f"{prefix}:a"), _fails(), _two_steps(f"{prefix}:b")]
    rounds: list[int] = []

    def abreast(shard: Shard) -> Steps[list[Any]]:
        program = in_step(shard, programs)
        step = next(program)
        while True:
            assert isinstance(step, Together) and step.tolerant
            rounds.append(len(step.steps))
            try:
                step = program.send((yield step))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    store = SyncJobStore.connect(settings)
    try:
        values = store.run(Op(Home(), abreast))
    finally:
        store.close()
    assert rounds == [3, 2]
    assert values[0] == values[2] == "True b'1'"
    assert isinstance(values[1], redis.ResponseError)


def test_a_redis_that_forgot_the_scripts_loads_them_once_for_a_batch(
    settings: Settings, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []
    execute = MuxRedis.execute

    async def counted(self: MuxRedis, *args: Any) -> Any:
        if args[:2] == ("FUNCTION", "LOAD"):
            loads.append("load")
        return await execute(self, *args)

    monkeypatch.setattr(MuxRedis, "execute", counted)
    batch = [(job(f"echo {i}"), Placement.fixed("n1"), NO_DEDUP) for i in range(50)]

    async def made() -> list[Any]:
        store = JobStore.connect(settings)
        try:
            await store.run(ops.jobs.create_many(batch[:1], NOW))  # connected, library loaded
            rclient.function_flush()
            loads.clear()
            return await store.run(ops.jobs.create_many(batch, NOW))
        finally:
            await store.aclose()

    values = asyncio.run(made())
    assert ids(values) == [f"job-{n}" for n in range(2, 52)]
    assert loads == ["load"]


def test_an_op_that_routes_others_is_refused_in_step(settings: Settings) -> None:
    store = SyncJobStore.connect(settings)
    try:
        (value,) = store.run(Op(Home(), lambda shard: in_step(shard, [_nested()])))
    finally:
        store.close()
    assert isinstance(value, TypeError)


def test_no_candidate_and_no_node_answer_as_a_lone_create(settings: Settings) -> None:
    store = SyncJobStore.connect(settings)
    try:
        lone = job("alone")
        with pytest.raises(NoHealthyNodes):
            store.run(ops.jobs.create(lone, Placement.live(), NOW))
        (value,) = store.run(ops.jobs.create_many([(lone, Placement.live(), NO_DEDUP)], NOW))
        assert isinstance(value, NoHealthyNodes)
        with pytest.raises(InvalidInput):
            store.run(ops.jobs.create(job("x", after=["job-77"]), Placement.fixed("n1"), NOW))
    finally:
        store.close()

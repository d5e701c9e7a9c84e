"""An old release's function library deleted once no process uses it
(ops.upkeep.retire_libraries): the worker's sweep deletes the libraries no process has marked
for the grace, never its own nor one marked within it; a process whose library was deleted
anyway loads it again."""

from __future__ import annotations

import uuid

import redis

from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.ops.upkeep import LIBRARY_GRACE_SECS
from scheduler.store.scripts import functions, metrics, retiring
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import CtxFactory
from workers import tasks


def old_library(r: redis.Redis) -> str:
    """A library of an older release, loaded (a name of this test's own: Redis's functions
    are shared by every test on the server)."""
    name = f"sched_test{uuid.uuid4().hex[:12]}"
    r.function_load(
        f"#!lua name={name}\nredis.register_function('{name}_f', function() return 1 end)"
    )
    return name


def loaded(r: redis.Redis, name: str) -> bool:
    return bool(r.function_list(library=name))


def redis_now(r: redis.Redis) -> int:
    return int(r.time()[0])


def mark(r: redis.Redis, keys: Keys, name: str, age: float) -> None:
    """`name` marked in use `age` seconds ago."""
    r.zadd(keys.libraries, {name: redis_now(r) - age})


def test_a_library_unmarked_past_the_grace_is_deleted_and_forgotten(
    store: SyncJobStore, rclient: redis.Redis
) -> None:
    old = old_library(rclient)
    mark(rclient, store.keys, old, LIBRARY_GRACE_SECS + 5)
    assert store.run(ops.upkeep.retire_libraries()) == [old]
    assert not loaded(rclient, old)
    own = functions.library().name
    assert rclient.zrange(store.keys.libraries, 0, -1) == [own.encode()]
    assert loaded(rclient, own)
    assert store.run(ops.upkeep.retire_libraries()) == []  # nothing left to delete


def test_a_library_marked_within_the_grace_stays(store: SyncJobStore, rclient: redis.Redis) -> None:
    old = old_library(rclient)
    mark(rclient, store.keys, old, LIBRARY_GRACE_SECS - 60)
    assert store.run(ops.upkeep.retire_libraries()) == []
    assert loaded(rclient, old)
    rclient.function_delete(old)


def test_a_library_never_marked_is_never_deleted(store: SyncJobStore, rclient: redis.Redis) -> None:
    """Only marks say a library is this deployment's: another's on the same Redis stays."""
    other = old_library(rclient)
    assert store.run(ops.upkeep.retire_libraries(grace=0)) == []
    assert loaded(rclient, other)
    rclient.function_delete(other)


def test_a_library_gone_already_is_forgotten(store: SyncJobStore, rclient: redis.Redis) -> None:
    mark(rclient, store.keys, "sched_gone", LIBRARY_GRACE_SECS + 5)  # never loaded here
    assert store.run(ops.upkeep.retire_libraries()) == ["sched_gone"]
    assert rclient.zscore(store.keys.libraries, "sched_gone") is None


def test_a_library_marked_again_while_deleted_keeps_its_mark(
    store: SyncJobStore, rclient: redis.Redis
) -> None:
    """A process of the old release that loaded it again (its function was missing) marked
    it after the sweep read it: it is deleted again only after another grace unmarked."""
    name = "sched_back"
    now = redis_now(rclient)
    mark(rclient, store.keys, name, 0)
    assert store.run(retiring.forget_libraries(now - LIBRARY_GRACE_SECS, [name])) == 0
    assert rclient.zscore(store.keys.libraries, name) is not None


def test_a_process_whose_library_was_deleted_loads_it_again(
    store: SyncJobStore, rclient: redis.Redis
) -> None:
    own = functions.library().name
    store.run(metrics.add_request_stats({}, read=False))  # loaded, if no test did yet
    rclient.function_delete(own)
    assert store.run(ops.upkeep.retire_libraries()) == []  # its FCALL loaded the library again
    assert loaded(rclient, own)
    assert rclient.zscore(store.keys.libraries, own) is not None


def test_an_api_process_marks_its_library_with_its_request_metrics(
    store: SyncJobStore, rclient: redis.Redis
) -> None:
    store.run(metrics.add_request_stats({"GET /jobs 200 count": 1.0}, read=False))
    mark_at = rclient.zscore(store.keys.libraries, functions.library().name)
    assert mark_at is not None and abs(mark_at - redis_now(rclient)) <= 1


def test_the_sweep_deletes_an_old_library(make_ctx: CtxFactory, rclient: redis.Redis) -> None:
    ctx = make_ctx()
    old = old_library(rclient)
    mark(rclient, ctx.keys, old, LIBRARY_GRACE_SECS + 5)
    tasks.sweep(period=1)
    assert not loaded(rclient, old)
    assert rclient.zscore(ctx.keys.libraries, functions.library().name) is not None

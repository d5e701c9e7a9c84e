"""The calls the API and a restore send in pieces of bounded work (issue 36: no script over
about 10 ms whatever a user built; store/pieces.py, snapshot/restore.py): a drain, a node's
deregistration, the UI's search, a restore. Each piece is one script call of bounded size,
and what the whole answers is what one unbounded call answered. Against a real Redis."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.job import JobCreate, new_job, stamped
from scheduler.nodes.placement import Placement
from scheduler.snapshot import restore
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops, pieces
from scheduler.store.operation import Home, Op
from scheduler.store.scripts import listing
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.scripts.listing import JobQuery, SearchQuery
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, assert_json, register, submit
from tests.snapshot_helpers import lose_redis_data


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    return make_client(max_jobs_per_node=100)


def queued_on_a(api: TestClient, count: int) -> list[str]:
    """`count` jobs on node a (the only node when they are made), then node b."""
    register(api, "a")
    made = [submit(api, command=f"job {i}")["job_id"] for i in range(count)]
    register(api, "b")
    return made


def test_a_drain_moves_the_queue_in_calls_of_bounded_size(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pieces, "MOVE_STEP", 2)
    limits: list[int] = []
    drain_node = pieces.drain_scripts.drain_node

    def counted(*args: Any) -> Any:
        limits.append(args[-1])
        return drain_node(*args)

    monkeypatch.setattr(pieces.drain_scripts, "drain_node", counted)
    made = queued_on_a(api, 5)
    answer = assert_json(api.post("/nodes/a/drain"))
    assert (answer["moved"], answer["stayed"]) == (5, 0)
    assert len(limits) >= 3 and max(limits) == 2
    assert {assert_json(api.get(f"/jobs/{j}"))["node_id"] for j in made} == {"b"}


def test_a_drain_moves_at_most_its_bound_in_all(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DRAIN_MOVES in all, as one call did: the rest stays for a drain again."""
    monkeypatch.setattr(pieces, "MOVE_STEP", 2)
    monkeypatch.setattr(pieces, "DRAIN_MOVES", 3)
    queued_on_a(api, 5)
    answer = assert_json(api.post("/nodes/a/drain"))
    assert (answer["moved"], answer["stayed"]) == (3, 2)
    assert assert_json(api.post("/nodes/a/drain"))["moved"] == 2


def test_a_deleted_nodes_queue_moves_a_bounded_piece_at_once_the_rest_at_the_sweep(
    api: TestClient, store: SyncJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scheduler.store.ops.nodes.MOVE_STEP", 2)
    made = queued_on_a(api, 5)
    assert api.delete("/nodes/a").status_code == 204

    def on_b() -> int:
        return sum(assert_json(api.get(f"/jobs/{j}"))["node_id"] == "b" for j in made)

    assert on_b() == 2
    assert len(store.run(ops.upkeep.requeue_lost(time.time()))) == 3
    assert on_b() == 5


def test_the_ui_search_reads_a_bounded_piece_a_call_and_its_page_looks_through_all(
    store: SyncJobStore,
) -> None:
    """400 commands of 2 KiB: more than one call reads (SEARCH_READ_BYTES). The oldest holds
    the needle."""
    store.redis.set(store.keys.initialised, "test")  # no API started: nothing to restore
    made = [store_job(store, "the needle " + "x" * 2000)]
    made += [store_job(store, f"echo {i} " + "x" * 2000) for i in range(399)]
    query = SearchQuery(JobQuery("", "", 0, 50), "needle", 5000)
    one = store.run(listing.search(query, 1 << 20))
    assert one.more and 0 < one.looked < len(made) and one.jobs == []

    page = store.run(Op(Home(), lambda _: pieces.searched(query, 1 << 20)))
    assert (page.looked, page.more) == (len(made), False)
    assert [json.loads(job)["job_id"] for job in page.jobs] == [made[0]]


def store_job(store: SyncJobStore, command: str) -> str:
    body, now = JobCreate(command=command), time.time()
    made = store.run(ops.jobs.create(stamped(new_job(body), body, now), Placement.fixed("a"), now))
    return str(json.loads(made.job)["job_id"])


def test_a_restore_puts_jobs_back_in_calls_of_bounded_size(
    api: TestClient, rclient: redis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restore, "PIECE_JOBS", 3)
    sizes: list[int] = []
    restore_jobs = snapshot_scripts.restore_jobs

    def counted(jobs: Any, mark_dirty: bool) -> Any:
        sizes.append(len(jobs))
        return restore_jobs(jobs, mark_dirty)

    monkeypatch.setattr(snapshot_scripts, "restore_jobs", counted)
    made = queued_on_a(api, 10)
    assert snapshot_once(settings) >= 10
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert max(sizes) == 3 and sum(sizes) == 10
    assert all(api.get(f"/jobs/{job_id}").status_code == 200 for job_id in made)

"""The background batches and a drain count the work of each job they handle as an ending's
settling does (store/scripts/endings.py units: a flat cost and its record's size), not only
their number: a batch of 200 jobs took ~5 ms with small records, and 180 to 200 ms with the
largest the API takes (a node_selector of ~66 KB: its record read, decoded, encoded and
written, the selector's 256 label values looked up). Each call stops once its units are
spent (after one job at least) and the caller calls again, so the whole is done as before.
Against a real Redis, the calls counted (no clock): benchmarks/script_bounds.py has times."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, assert_json, last_heard, report
from tests.store.test_settling_bounds import LARGE_SELECTOR

JOBS = 30  # each ~66 KB: about five a call, against 50 or 200 small ones


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=JOBS, max_job_retries=0, job_retention_secs=1)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def register_fitting(api: TestClient, node_id: str) -> None:
    """A node whose labels the large selector takes (one of each key's values)."""
    labels = {key: values[0] for key, values in LARGE_SELECTOR.items()}
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
    assert api.post("/nodes/register", json={**body, "labels": labels}).status_code == 201


def large_jobs(api: TestClient, **fields: Any) -> list[str]:
    body = {"command": "x", "node_selector": LARGE_SELECTOR, **fields}
    return [assert_json(api.post("/jobs", json=body), 201)["job_id"] for _ in range(JOBS)]


def counted(store: SyncJobStore, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], int]:
    """How many calls of each script the store runs from now on, by name."""
    calls: dict[str, int] = {}
    call_script = store.call

    def counting(call: Any) -> Any:
        calls[call.script.name] = calls.get(call.script.name, 0) + 1
        return call_script(call)

    monkeypatch.setattr(store, "call", counting)
    return lambda name: calls.get(name, 0)


def running(api: TestClient) -> list[str]:
    register_fitting(api, "n1")
    made = large_jobs(api)
    for job_id in made:
        assert report(api, job_id, "running").status_code == 200
    return made


def test_the_timeout_sweep_takes_fewer_large_jobs_a_call(
    api: TestClient, store: SyncJobStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = running(api)
    calls = counted(store, monkeypatch)
    assert sorted(
        store.run(ops.upkeep.sweep_timeouts(time.time() + settings.job_timeout_secs + 1))
    ) == sorted(made)
    assert calls("SWEEP_TIMEOUTS") >= 4


def test_the_node_loss_takes_fewer_large_jobs_a_call(
    api: TestClient,
    store: SyncJobStore,
    settings: Settings,
    rclient: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = running(api)
    last_heard(rclient, settings, "n1", time.time() - 10 * settings.node_lost_after)
    calls = counted(store, monkeypatch)
    assert sorted(
        lost.job_id for lost in store.run(ops.upkeep.lose_running(time.time()))
    ) == sorted(made)
    assert calls("LOSE_RUNNING") >= 4


def test_promote_takes_fewer_large_jobs_a_call(
    api: TestClient, store: SyncJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_fitting(api, "n1")
    made = large_jobs(api, delay_secs=1)
    calls = counted(store, monkeypatch)
    assert sorted(store.run(ops.upkeep.promote_due(time.time() + 2))) == sorted(made)
    assert calls("PROMOTE_DUE") >= 4


def test_the_placement_pass_takes_fewer_large_jobs_a_call(
    api: TestClient, store: SyncJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = large_jobs(api)  # no node fits: unplaced
    register_fitting(api, "n1")  # room appeared: a pass is flagged
    calls = counted(store, monkeypatch)
    assert sorted(store.run(ops.upkeep.place_unplaced(time.time()))) == sorted(made)
    assert calls("PLACE_UNPLACED") >= 4


def test_the_placement_pass_counts_the_nodes_a_wide_selector_reads(
    api: TestClient, store: SyncJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small jobs pinned to a label 300 nodes share: placing each reads all 300 (about 1 ms;
    6 ms at MAX_NODES), so a pass places a few a call, not all 30 in one."""
    wide = {"command": "x", "node_selector": {"zone": "a"}}
    made = [assert_json(api.post("/jobs", json=wide), 201)["job_id"] for _ in range(JOBS)]
    for n in range(300):
        node = {"id": f"w{n:03d}", "cpu_count": 2, "role": "compute", "labels": {"zone": "a"}}
        assert api.post("/nodes/register", json=node).status_code == 201
    calls = counted(store, monkeypatch)
    assert sorted(store.run(ops.upkeep.place_unplaced(time.time()))) == sorted(made)
    assert calls("PLACE_UNPLACED") >= 6


def test_the_retention_sweep_takes_fewer_large_jobs_a_call(
    api: TestClient, store: SyncJobStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_fitting(api, "n1")
    made = large_jobs(api)
    for job_id in made:
        assert_json(api.delete(f"/jobs/{job_id}"))
    assert snapshot_once(settings) >= JOBS
    calls = counted(store, monkeypatch)
    assert sorted(store.run(ops.upkeep.prune_finished(time.time() + 10))) == sorted(made)
    assert calls("PRUNE_FINISHED") >= 4


def test_a_lost_nodes_queue_moves_in_calls_of_fewer_large_jobs(
    api: TestClient,
    store: SyncJobStore,
    settings: Settings,
    rclient: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register_fitting(api, "n1")
    made = large_jobs(api)
    register_fitting(api, "n2")
    last_heard(rclient, settings, "n1", time.time() - 10 * settings.node_lost_after)
    calls = counted(store, monkeypatch)
    assert sorted(
        moved.job_id for moved in store.run(ops.upkeep.requeue_lost(time.time()))
    ) == sorted(made)
    assert calls("REQUEUE_LOST") >= 4


def test_a_drain_moves_large_jobs_in_more_calls(
    api: TestClient, store: SyncJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_fitting(api, "n1")
    made = large_jobs(api)
    register_fitting(api, "n2")
    calls = counted(store, monkeypatch)

    done = store.run(ops.nodes.drain_node("n1", time.time(), "operator", caller="key"))
    assert sorted(moved.job_id for moved in done.moved) == sorted(made)
    assert done.stayed == 0
    assert calls("DRAIN_NODE") >= 4


def test_a_drain_counts_the_placing_of_jobs_whose_selector_allows_many_values(
    api: TestClient, store: SyncJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 keys of 16 one-letter values: a small record (~2 KB), but 256 label sets looked up
    to place each job."""
    many = {f"k{k:02d}": [f"{v:x}" for v in range(16)] for k in range(16)}
    node = {"hostname": "h", "cpu_count": 2, "role": "compute", "labels": dict.fromkeys(many, "0")}
    assert api.post("/nodes/register", json={"id": "n1", **node}).status_code == 201
    body = {"command": "x", "node_selector": many}
    made = [assert_json(api.post("/jobs", json=body), 201)["job_id"] for _ in range(JOBS)]
    assert api.post("/nodes/register", json={"id": "n2", **node}).status_code == 201
    calls = counted(store, monkeypatch)

    done = store.run(ops.nodes.drain_node("n1", time.time(), "operator", caller="key"))
    assert sorted(moved.job_id for moved in done.moved) == sorted(made)
    assert calls("DRAIN_NODE") >= 4

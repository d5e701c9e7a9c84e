"""Issue 24, item 4: drains (docs/GUIDE.md, Drain). POST /nodes/{id}/drain: no new job goes to the
node, its jobs not running leave it through placement (a node that fits, or none yet), its
running jobs finish and report as ever (a retry is placed elsewhere); undrain makes it a
candidate again; a registration lifts only the node's own "stopping" drain. In process
against the real Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    Json,
    assert_json,
    assert_text_error,
    last_heard,
    register,
    report,
    submit,
)
from tests.fakes import FakeRegistry


def drain(api: TestClient, node: str, **body: Any) -> Any:
    return api.post(f"/nodes/{node}/drain", json=body) if body else api.post(f"/nodes/{node}/drain")


def drained(api: TestClient, node: str, **body: Any) -> Json:
    answer: Json = assert_json(drain(api, node, **body))
    return answer


def undrained(api: TestClient, node: str) -> Json:
    answer: Json = assert_json(api.post(f"/nodes/{node}/undrain"))
    return answer


def reason_of(api: TestClient, job: Json) -> tuple[str, str]:
    found = assert_json(api.get(f"/jobs/{job['job_id']}"))
    return found["node_id"], found.get("pending_reason", "")


def nodes_of(api: TestClient, jobs: list[Json]) -> list[str]:
    return [assert_json(api.get(f"/jobs/{job['job_id']}"))["node_id"] for job in jobs]


def polled(api: TestClient, node: str) -> list[str]:
    got = assert_json(api.get(f"/jobs?node_id={node}&status=pending"))
    return [job["job_id"] for job in got]


def test_a_drained_node_gets_no_new_job_and_its_queue_moves(client: TestClient) -> None:
    register(client, "n1", "n2")
    queued = [submit(client, command=f"echo {i}") for i in range(6)]
    assert sorted(nodes_of(client, queued)) == ["n1"] * 3 + ["n2"] * 3
    running = next(job for job in queued if job["node_id"] == "n1")
    assert_json(report(client, running["job_id"], "running"))

    answer = drained(client, "n1")
    assert answer["id"] == "n1" and answer["status"] == "healthy"
    assert (answer["drained"], answer["drained_by"]) == (True, "operator")
    assert (answer["moved"], answer["stayed"]) == (2, 0)
    # Its pending jobs are n2's now, in n2's queue; its running job stays with it.
    after = dict(zip([j["job_id"] for j in queued], nodes_of(client, queued), strict=True))
    assert after[running["job_id"]] == "n1"
    assert sorted(after.values()) == ["n1"] + ["n2"] * 5
    # Submit many: none goes to n1.
    assert set(nodes_of(client, [submit(client, command="x") for _ in range(20)])) == {"n2"}
    assert polled(client, "n1") == []
    # Its running job finishes and reports normally.
    done = assert_json(report(client, running["job_id"], "done", exit_code=0, stdout="ok"))
    assert (done["status"], done["node_id"]) == ("done", "n1")

    listed = assert_json(client.get("/nodes"))
    assert (listed["n1"]["drained"], listed["n1"]["drained_by"]) == (True, "operator")
    assert "drained" not in listed["n2"] and "drained_by" not in listed["n2"]

    back = undrained(client, "n1")
    assert back["undrained"] is True and "drained" not in back
    assert "n1" in nodes_of(client, [submit(client, command="y") for _ in range(2)])
    assert undrained(client, "n1")["undrained"] is False  # idempotent


def test_a_repeated_drain_moves_nothing_more(client: TestClient) -> None:
    register(client, "n1", "n2")
    for _ in range(4):
        submit(client, command="x")
    assert drained(client, "n1")["moved"] == 2
    again = drained(client, "n1")
    assert (again["moved"], again["unplaced"], again["stayed"]) == (0, 0, 0)
    assert again["drained_by"] == "operator"


def test_with_no_other_node_the_jobs_wait_unplaced_until_one_comes(
    client: TestClient, store: SyncJobStore
) -> None:
    register(client, "n1")
    jobs = [submit(client, command="x") for _ in range(3)]
    answer = drained(client, "n1")
    assert (answer["moved"], answer["unplaced"], answer["stayed"]) == (0, 3, 0)
    assert polled(client, "n1") == []  # a drained node starts nothing new
    assert [reason_of(client, job) for job in jobs] == [("", "drained")] * 3
    # A new job waits the same way (only drained nodes: not the 503 of no node at all).
    later = submit(client, command="y")
    assert (later["node_id"], later["pending_reason"]) == ("", "drained")
    # A node registering flags them: the next placement pass (the promote tick) places them.
    register(client, "n2")
    placed = store.run(ops.upkeep.place_unplaced(time.time()))
    assert sorted(placed) == sorted(job["job_id"] for job in [*jobs, later])
    assert set(nodes_of(client, [*jobs, later])) == {"n2"}
    again = drained(client, "n1")
    assert (again["moved"], again["unplaced"], again["stayed"]) == (0, 0, 0)


def test_undrain_places_the_jobs_waiting_for_it(client: TestClient, store: SyncJobStore) -> None:
    register(client, "n1")
    job = submit(client, command="x")
    drained(client, "n1")
    assert polled(client, "n1") == []
    undrained(client, "n1")
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [job["job_id"]]
    assert polled(client, "n1") == [job["job_id"]]


def test_delayed_and_waiting_jobs_leave_the_drained_node_for_placement(
    client: TestClient, store: SyncJobStore, rclient: Any, settings: Any
) -> None:
    register(client, "n1")
    first = submit(client, command="first")
    later = submit(client, command="later", delay_secs=60)
    after = submit(client, command="after", after=[first["job_id"]])
    assert nodes_of(client, [first, later, after]) == ["n1"] * 3
    register(client, "n2")
    answer = drained(client, "n1")
    assert (answer["moved"], answer["unplaced"], answer["stayed"]) == (1, 2, 0)
    # The pending job is n2's; the delayed and the waiting one keep their status on no node
    # yet: placed when due, or when the wait is over.
    states = [assert_json(client.get(f"/jobs/{j['job_id']}")) for j in (first, later, after)]
    assert [(j["status"], j["node_id"]) for j in states] == [
        ("pending", "n2"),
        ("delayed", ""),
        ("waiting", ""),
    ]
    assert_json(report(client, first["job_id"], "running"))
    assert_json(report(client, first["job_id"], "done", exit_code=0))
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [after["job_id"]]
    assert nodes_of(client, [after]) == ["n2"]  # n1 is drained
    # Due once n2 is drained and n1 undrained: placed on n1.
    drained(client, "n2")
    undrained(client, "n1")
    due = time.time() + 120
    for node in ("n1", "n2"):  # both still heard from when the delay is due
        last_heard(rclient, settings, node, due)
    assert store.run(ops.upkeep.promote_due(due)) == [later["job_id"]]
    assert nodes_of(client, [later]) == ["n1"]


def test_a_retry_of_a_job_on_a_drained_node_goes_elsewhere(
    make_client: ClientFactory, store: SyncJobStore
) -> None:
    api = make_client(max_job_retries=1)
    register(api, "n1", "n2")
    job = submit(api, command="flaky")
    assert job["node_id"] == "n1"
    assert_json(report(api, job["job_id"], "running"))
    drained(api, "n1")
    # To placement: on no node until the next pass (the worker's promote tick) places it.
    again = assert_json(report(api, job["job_id"], "failed", exit_code=1))
    assert (again["status"], again["node_id"]) == ("pending", "")
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [job["job_id"]]
    assert nodes_of(api, [job]) == ["n2"]


def test_retries_off_a_drained_node_are_placed_by_fit_or_wait_unplaced(
    make_client: ClientFactory, store: SyncJobStore, rclient: Any, settings: Any
) -> None:
    """A failed report's retry and a timeout's (a job with its own max_retries) go where
    placement puts them: a node that fits what the job asks, or none yet, with the reason."""
    api = make_client(max_job_retries=0)
    for node, cpus in (("big", 4), ("small", 1)):
        body = {"id": node, "hostname": node, "cpu_count": cpus, "role": "compute"}
        assert api.post("/nodes/register", json=body).status_code == 201
    job = submit(api, command="flaky", cpus=2, max_retries=2)
    assert job["node_id"] == "big"
    assert_json(report(api, job["job_id"], "running"))
    drained(api, "big")
    again = assert_json(report(api, job["job_id"], "failed", exit_code=1))
    assert (again["status"], again["node_id"]) == ("pending", "")
    assert store.run(ops.upkeep.place_unplaced(time.time())) == []  # small is too small
    assert reason_of(api, job) == ("", "drained")
    body = {"id": "other", "hostname": "other", "cpu_count": 2, "role": "compute"}
    assert api.post("/nodes/register", json=body).status_code == 201
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [job["job_id"]]
    assert nodes_of(api, [job]) == ["other"]
    assert_json(report(api, job["job_id"], "running"))
    drained(api, "other")
    late = time.time() + settings.job_timeout_secs + 1
    for node in ("big", "small", "other"):  # still heard from when the job times out
        last_heard(rclient, settings, node, late)
    assert store.run(ops.upkeep.sweep_timeouts(late)) == [job["job_id"]]
    assert store.run(ops.upkeep.place_unplaced(late)) == []
    timed_out = assert_json(api.get(f"/jobs/{job['job_id']}"))
    assert (timed_out["status"], timed_out["node_id"]) == ("pending", "")
    assert (timed_out["retry_count"], timed_out["pending_reason"]) == (2, "drained")
    undrained(api, "big")
    assert store.run(ops.upkeep.place_unplaced(time.time())) == [job["job_id"]]
    assert nodes_of(api, [job]) == ["big"]


def test_a_retry_by_hand_or_get_schedule_never_picks_a_drained_node(
    make_client: ClientFactory,
) -> None:
    client = make_client(max_job_retries=0)
    register(client, "n1", "n2")
    drained(client, "n1")
    assert {assert_json(client.get("/schedule"))["node_id"] for _ in range(4)} == {"n2"}
    job = submit(client, command="x")
    assert_json(report(client, job["job_id"], "running"))
    assert_json(report(client, job["job_id"], "failed", exit_code=1))
    undrained(client, "n1")
    drained(client, "n2")
    retried = assert_json(client.post(f"/jobs/{job['job_id']}/retry"))
    assert retried["node_id"] == "n1"


def test_unknown_nodes_are_404_and_write_nothing(
    client: TestClient, rclient: Any, prefix: str
) -> None:
    for path in ("/nodes/ghost/drain", "/nodes/ghost/undrain"):
        assert_text_error(client.post(path), 404, "node not found")
    keys = Keys(prefix)
    assert rclient.exists(keys.drained_nodes, keys.drained_changes) == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"by": "someone"}, "invalid by 'someone': use operator or stopping"),
        ({"by": 3}, "invalid drain: by: must be a string, got an integer"),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field(client: TestClient, body: Any, message: str) -> None:
    register(client, "n1")
    assert_text_error(client.post("/nodes/n1/drain", json=body), 400, message)
    assert "drained" not in assert_json(client.get("/nodes"))["n1"]


def test_registering_again_lifts_only_a_stopping_drain(client: TestClient) -> None:
    register(client, "n1", "n2")
    assert drained(client, "n1", by="stopping")["drained_by"] == "stopping"
    register(client, "n1")
    assert "drained" not in assert_json(client.get("/nodes"))["n1"]

    drained(client, "n2")  # the operator's, for maintenance
    drained(client, "n2", by="stopping")  # its agent stops: the operator's drain stays
    client.post("/nodes/heartbeat", json={"id": "n2"})
    register(client, "n2")
    assert assert_json(client.get("/nodes"))["n2"]["drained_by"] == "operator"
    # Deleted (the agent's clean stop deregisters it) and back: still the operator's.
    assert client.delete("/nodes/n2").status_code == 204
    register(client, "n2")
    assert assert_json(client.get("/nodes"))["n2"]["drained_by"] == "operator"


def test_a_deleted_node_leaves_its_stopping_drain_and_keeps_the_operators(
    client: TestClient, rclient: Any, prefix: str
) -> None:
    register(client, "n1", "n2")
    drained(client, "n1", by="stopping")
    drained(client, "n2")
    assert client.delete("/nodes/n1").status_code == 204
    assert client.delete("/nodes/n2").status_code == 204
    assert rclient.hgetall(Keys(prefix).drained_nodes) == {b"n2": b"operator"}
    # The operator can still lift a drain left on an id no registry lists.
    assert undrained(client, "n2") == {
        "id": "n2", "hostname": "", "addr": "", "cpu_count": 0, "role": "", "status": "",
        "last_seen": "", "memory_mb": 0, "labels": {}, "undrained": True,
    }  # fmt: skip
    assert_text_error(client.post("/nodes/n2/undrain"), 404, "node not found")


def test_a_lost_drained_node_is_not_a_target_for_the_sweep(
    client: TestClient, rclient: Any, settings: Any, store: Any
) -> None:
    """A lost node's queue goes to live nodes, never to a drained one."""
    register(client, "n1", "n2", "n3")
    jobs = [submit(client, command="x") for _ in range(3)]
    drained(client, "n2")  # its one job moves to n1 or n3
    last_heard(rclient, settings, "n3", time.time() - 3600)
    moved = store.run(ops.upkeep.requeue_lost(time.time()))
    assert moved and {m.to_node for m in moved} == {"n1"}
    assert set(nodes_of(client, jobs)) == {"n1"}


def test_metrics_and_overview_show_the_drain(make_client: ClientFactory) -> None:
    api = make_client(metrics="on")
    register(api, "n1", "n2")
    drained(api, "n1")
    text = api.get("/metrics").text
    assert 'scheduler_node_drained{node="n1"} 1.0' in text
    # A node idle and not drained is counted, not named (api/metrics.py).
    assert 'node="n2"' not in text and "scheduler_nodes_drained 1.0" in text


def test_with_an_external_registry_its_node_ids_are_drained(
    make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    """REGISTRY_URL: a node the registry lists may be drained (the drains are ours, whatever
    the registry says of them); one it does not list is 404 and nothing is written."""
    with FakeRegistry() as registry:
        registry.nodes.update({"n1": "healthy", "n2": "healthy"})
        registry.fields["n1"] = {"hostname": "h1", "drained": True, "drained_by": "registry"}
        api = make_client(registry_url=registry.url, registry_cache_secs=60, max_job_retries=1)
        assert "drained" not in assert_json(api.get("/nodes"))["n1"]
        # The sweep's sightings of the registry's healthy nodes: where moved jobs may go (its
        # nodes carry no room: round-robin, never unplaced, which nothing would place).
        rclient.zadd(Keys(prefix).nodes_compute, {"n1": time.time(), "n2": time.time()})
        jobs = [submit(api, command="x") for _ in range(4)]
        assert sorted(nodes_of(api, jobs)) == ["n1", "n1", "n2", "n2"]
        running = next(job for job in jobs if job["node_id"] == "n1")
        assert_json(report(api, running["job_id"], "running"))
        answer = drained(api, "n1")
        assert (answer["hostname"], answer["drained_by"]) == ("h1", "operator")
        assert (answer["moved"], answer["unplaced"], answer["stayed"]) == (1, 0, 0)
        again = assert_json(report(api, running["job_id"], "failed", exit_code=1))
        assert (again["status"], again["node_id"]) == ("pending", "n2")
        assert set(nodes_of(api, jobs)) == {"n2"}
        assert {submit(api, command="y")["node_id"] for _ in range(4)} == {"n2"}
        assert assert_json(api.get("/nodes"))["n1"]["drained_by"] == "operator"
        assert_text_error(api.post("/nodes/ghost/drain"), 404, "node not found")
        assert rclient.hkeys(Keys(prefix).drained_nodes) == [b"n1"]
        assert undrained(api, "n1")["undrained"] is True

"""Placement over the shards of a sharded deployment (store/jobs.py): a job that asks for
a node goes to the shard holding one, not to whichever shard's turn it is, and an
Idempotency-Key's replay finds its job whichever shard made it (create.py ELSEWHERE), a shard
that lost its data being restored before a key is marked in it, and a request that made no
job (every shard answered NO_NODES, or one refused it) takes back its own marks only. And
its schedules, kept on shard 0."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.job import Job
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.operation import Command, Op, Shard, Steps
from scheduler.store.scripts.create import Created, Dedup
from scheduler.store.shards import Layout, key_order, node_shard
from scheduler.store.sync_store import SyncJobStore
from tests.api.test_shards_start import snapshot_every_shard
from tests.conftest import ClientFactory, SettingsFactory, assert_json, register
from tests.fakes import FakeRegistry
from tests.snapshot_helpers import lose_redis_data

SHARDS = 3


def node_on(shard: int, stem: str) -> str:
    """The first id `stem`-i that lands on `shard`."""
    return next(f"{stem}-{i}" for i in range(1000) if node_shard(f"{stem}-{i}", SHARDS) == shard)


def register_labelled(api: TestClient, node_id: str, **labels: str) -> None:
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "labels": labels}
    assert api.post("/nodes/register", json=body).status_code == 201


def every_job(api: TestClient) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = assert_json(api.get("/jobs"))
    return jobs


def test_a_job_asking_a_label_goes_to_the_one_shard_that_has_it(
    make_client: ClientFactory,
) -> None:
    api = make_client(shards=SHARDS)
    gpu = node_on(2, "gpu")
    register(api, node_on(0, "cpu"), node_on(1, "cpu"))
    register_labelled(api, gpu, kind="gpu")
    made = [
        assert_json(api.post("/jobs", json={"command": "x", "node_selector": {"kind": "gpu"}}), 201)
        for _ in range(6)
    ]
    assert {job["node_id"] for job in made} == {gpu}
    assert {Layout(SHARDS).job_shard(job["job_id"]) for job in made} == {2}
    plain = [assert_json(api.post("/jobs", json={"command": "y"}), 201) for _ in range(6)]
    assert {Layout(SHARDS).job_shard(job["job_id"]) for job in plain} == {0, 1, 2}


def test_a_delayed_job_asking_a_label_waits_on_the_shard_that_has_it(
    make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    """A delayed job that asks a fit is placed when due, by its own shard's nodes: it is made
    on a shard with a node that matches it, so when due it runs there, as on one shard (it
    was made on whichever shard's turn it was, and waited there for a node none had)."""
    settings = make_settings(shards=SHARDS, node_ttl_secs=86_400)
    api = make_client(settings)
    gpu = node_on(2, "gpu")
    register(api, node_on(0, "cpu"), node_on(1, "cpu"))
    register_labelled(api, gpu, kind="gpu")
    due = time.time() + 3600  # still delayed however slow the posts below
    body = {"command": "x", "node_selector": {"kind": "gpu"}, "run_at": rfc3339(due)}
    made = [assert_json(api.post("/jobs", json=body), 201)["job_id"] for _ in range(SHARDS)]
    assert {Layout(SHARDS).job_shard(job_id) for job_id in made} == {2}
    store = SyncJobStore.connect(settings.for_shard(2))
    try:
        assert sorted(store.run(ops.upkeep.promote_due(due + 1))) == sorted(made)
    finally:
        store.close()
    for job_id in made:
        job = assert_json(api.get(f"/jobs/{job_id}"))
        assert (job["status"], job["node_id"]) == ("pending", gpu)


def test_a_job_no_node_can_take_is_made_once_and_waits(make_client: ClientFactory) -> None:
    api = make_client(shards=SHARDS)
    register(api, *(node_on(k, "n") for k in range(SHARDS)))
    job = assert_json(
        api.post("/jobs", json={"command": "x", "node_selector": {"kind": "tpu"}}), 201
    )
    assert (job["status"], job["node_id"], job["pending_reason"]) == ("pending", "", "no_fit")
    assert [j["job_id"] for j in every_job(api)] == [job["job_id"]]


def test_a_replay_finds_its_job_on_a_later_shard_after_an_earlier_one_can_take_it(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: Any
) -> None:
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    key = "replay-1"
    digest = digest_of(key)
    first, _, last = key_order(f"submit:{digest}", SHARDS)
    register(api, *(node_on(k, "n") for k in range(SHARDS)))
    register_labelled(api, node_on(last, "gpu"), kind="gpu")
    body = {"command": "x", "node_selector": {"kind": "gpu"}}
    headers = {"Idempotency-Key": key}
    made = assert_json(api.post("/jobs", json=body, headers=headers), 201)
    assert Layout(SHARDS).job_shard(made["job_id"]) == last
    # Now the key's first shard has a node for it too: the replay must not make a second job.
    register_labelled(api, node_on(first, "gpu2"), kind="gpu")
    again = assert_json(api.post("/jobs", json=body, headers=headers), 200)
    assert again["job_id"] == made["job_id"]
    assert [j["job_id"] for j in every_job(api)] == [made["job_id"]]
    refused = api.post("/jobs", json={**body, "command": "other"}, headers=headers)
    assert refused.status_code == 422
    assert [j["job_id"] for j in every_job(api)] == [made["job_id"]]
    # The shards it passed through hold the key's mark, not a job.
    first_keys = Keys(settings.for_shard(first).redis_prefix)
    assert rclient.get(first_keys.submission(digest)) == b"-"


def digest_of(key: str) -> str:
    """A POST /jobs Idempotency-Key as api/hot.py keeps it."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def order_of(key: str) -> list[int]:
    """The shards a POST /jobs Idempotency-Key walks, in order."""
    return key_order(f"submit:{digest_of(key)}", SHARDS)


def marks(rclient: Any, settings: Settings, key: str) -> list[bytes | None]:
    """What each shard holds under a POST /jobs Idempotency-Key, by shard."""
    held = (
        Keys(settings.for_shard(k).redis_prefix).submission(digest_of(key)) for k in range(SHARDS)
    )
    return [rclient.get(name) for name in held]


def deps_on_every_shard(api: TestClient) -> dict[int, str]:
    """A job on each shard (by shard), for a new job to run after."""
    deps: dict[int, str] = {}
    while len(deps) < SHARDS:
        job_id = assert_json(api.post("/jobs", json={"command": "dep"}), 201)["job_id"]
        deps.setdefault(Layout(SHARDS).job_shard(job_id), job_id)
    return deps


@pytest.mark.parametrize(
    "first, then", [("after", "plain"), ("plain", "after"), ("after", "after another")]
)
def test_a_key_reused_for_a_job_of_another_shard_is_refused_as_unsharded(
    make_client: ClientFactory, first: str, then: str
) -> None:
    """A job that runs after others is made on their shard, not the key's: the key's reuse
    for another request that would go to another shard is the 422 of one shard, and makes
    nothing (it made a second job)."""
    api = make_client(shards=SHARDS)
    register(api, *(node_on(k, "n") for k in range(SHARDS)))
    deps = deps_on_every_shard(api)
    key = f"reuse-{first}-{then}".replace(" ", "-")
    order = order_of(key)  # a plain request goes to order[0], every shard having a node
    bodies = {
        "plain": {"command": "x"},
        "after": {"command": "x", "after": [deps[order[-1]]]},
        "after another": {"command": "x", "after": [deps[order[1]]]},
    }
    headers = {"Idempotency-Key": key}
    made = assert_json(api.post("/jobs", json=bodies[first], headers=headers), 201)
    before = every_job(api)
    refused = api.post("/jobs", json=bodies[then], headers=headers)
    assert refused.status_code == 422, refused.text
    assert every_job(api) == before
    assert assert_json(api.post("/jobs", json=bodies[first], headers=headers)) == made


def test_a_keyed_create_no_shard_makes_leaves_the_last_shards_key_alone(
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    rclient: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No shard has a node: every shard answers NO_NODES, the last without marking the key
    (it may make the job: Placement.elsewhere is off). Another request under the key makes
    its job there meanwhile (a node came up): the 503's cleanup took its key too (a DEL on
    every shard), and that request's replay made a second job. Only the marks the refused
    request wrote are taken back."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    key = "last-maker"
    made_meanwhile = b"job-7 " + b"f" * 32  # the other request's job and fingerprint
    made_on = ops.jobs.made_on

    def racing(job: Job, here: Placement, now: float, dedup: Dedup) -> Op[Created]:
        op = made_on(job, here, now, dedup)

        def program(shard: Shard) -> Steps[Created]:
            try:
                return (yield from op.program(shard))
            except NoHealthyNodes:
                if not here.elsewhere:  # the walk's last shard answered: the other request runs
                    key = shard.keys.submission(dedup.key)
                    yield Command(("SET", key, made_meanwhile))
                raise

        return Op(op.route, program, op.name)

    monkeypatch.setattr(ops.jobs, "made_on", racing)
    refused = api.post("/jobs", json={"command": "x"}, headers={"Idempotency-Key": key})
    assert refused.status_code == 503, refused.text
    *passed, last = order_of(key)
    held = marks(rclient, settings, key)
    assert held[last] == made_meanwhile
    assert [held[k] for k in passed] == [None] * len(passed)


def test_a_keyed_create_refused_as_invalid_takes_back_its_marks(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: Any
) -> None:
    """A job that runs after a job of no such number, on the key's last shard: the shards
    before it, passed over (PASS_KEY), marked the key, and the 400 left the marks, so the
    key's next request passed over shards that could take its job (and a replay of one in
    the gap could make a second job)."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    key = "invalid-after"
    order = order_of(key)
    missing = next(
        f"job-{n}" for n in range(1000, 2000) if Layout(SHARDS).job_shard(f"job-{n}") == order[-1]
    )
    headers = {"Idempotency-Key": key}
    refused = api.post("/jobs", json={"command": "x", "after": [missing]}, headers=headers)
    assert refused.status_code == 400, refused.text
    assert marks(rclient, settings, key) == [None] * SHARDS
    register(api, *(node_on(k, "n") for k in range(SHARDS)))
    made = assert_json(api.post("/jobs", json={"command": "x"}, headers=headers), 201)
    assert Layout(SHARDS).job_shard(made["job_id"]) == order[0]


def test_a_refused_reuse_of_a_key_keeps_the_marks_its_job_relies_on(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: Any
) -> None:
    """A 422 for another request under a key that made a job is no refusal that made nothing:
    the key's job is on a later shard, and the marks before it send its replay there."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    key = "mismatch-keeps"
    first, second, _ = order_of(key)
    register(api, node_on(second, "n"))
    headers = {"Idempotency-Key": key}
    made = assert_json(api.post("/jobs", json={"command": "x"}, headers=headers), 201)
    assert Layout(SHARDS).job_shard(made["job_id"]) == second
    refused = api.post("/jobs", json={"command": "other"}, headers=headers)
    assert refused.status_code == 422, refused.text
    assert marks(rclient, settings, key)[first] == b"-"
    register(api, node_on(first, "n"))
    assert assert_json(api.post("/jobs", json={"command": "x"}, headers=headers)) == made
    assert [job["job_id"] for job in every_job(api)] == [made["job_id"]]


def test_a_keyed_create_passing_over_a_shard_that_lost_its_data_restores_it_first(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: Any
) -> None:
    """The key's first shard lost its data and the job is bound to its last (it runs after a
    job there). PASS_KEY marked the key in the empty Redis and the walk went on, where the
    create script answers NOT_READY first: the shard is restored before anything is written
    to it, and its jobs are found again."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    register(api, *(node_on(k, "n") for k in range(SHARDS)))
    deps = deps_on_every_shard(api)
    key = "lost-first"
    order = order_of(key)
    snapshot_every_shard(settings)
    lose_redis_data(rclient, settings.for_shard(order[0]).redis_prefix)
    body = {"command": "x", "after": [deps[order[-1]]]}
    made = assert_json(api.post("/jobs", json=body, headers={"Idempotency-Key": key}), 201)
    assert Layout(SHARDS).job_shard(made["job_id"]) == order[-1]
    assert assert_json(api.get(f"/jobs/{deps[order[0]]}"))["job_id"] == deps[order[0]]
    assert marks(rclient, settings, key)[order[0]] == b"-"


def test_a_replay_finds_its_job_after_the_registrys_nodes_move_to_another_shard(
    make_client: ClientFactory,
) -> None:
    """With REGISTRY_URL, a job goes to a shard holding one of the registry's healthy nodes.
    The replay after a node of the key's first shard turned healthy answers the job made,
    as one shard does, and makes none there."""
    key = "registry-replay"
    first, second, _ = order_of(key)
    with FakeRegistry() as registry:
        registry.nodes[node_on(second, "n")] = "healthy"
        api = make_client(shards=SHARDS, registry_url=registry.url, registry_cache_secs=0)
        headers = {"Idempotency-Key": key}
        made = assert_json(api.post("/jobs", json={"command": "x"}, headers=headers), 201)
        assert Layout(SHARDS).job_shard(made["job_id"]) == second
        registry.nodes[node_on(first, "n")] = "healthy"
        again = assert_json(api.post("/jobs", json={"command": "x"}, headers=headers))
        assert again == made
        assert [job["job_id"] for job in every_job(api)] == [made["job_id"]]


def test_schedules_live_on_shard_zero(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: Any
) -> None:
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    body = {"name": "nightly", "cron": "0 3 * * *", "job": {"command": "backup"}}
    assert api.post("/schedules", json=body).status_code == 201
    assert api.post("/schedules/nightly/pause").status_code == 200
    assert assert_json(api.get("/schedules/nightly"))["paused"] is True
    assert [s["name"] for s in assert_json(api.get("/schedules"))] == ["nightly"]
    assert rclient.hexists(Keys(settings.redis_prefix).schedules, "nightly")
    for shard in range(1, SHARDS):
        assert not rclient.exists(Keys(settings.for_shard(shard).redis_prefix).schedules)
    assert api.delete("/schedules/nightly").status_code in (200, 204)
    assert api.get("/schedules/nightly").status_code == 404

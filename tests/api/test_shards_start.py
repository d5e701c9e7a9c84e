"""A sharded deployment's start (store/jobs.py): an unsharded deployment upgraded to
SCHEDULER_SHARDS=3 keeps its jobs and draws new ids above them on every shard, a later
change of the count is refused, and a Redis unreachable at the start is a 503 until it
answers. And the UI's jobs page, which lists and searches every shard."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.api import ui_jobs
from scheduler.api.app import create_app
from scheduler.config import Settings
from scheduler.models.job import job_number
from scheduler.snapshot.restore import restore_if_empty
from scheduler.store.errors import LayoutChanged
from scheduler.store.keys import Keys
from tests.api.test_shards import (
    LAYOUT,
    SHARDS,
    by_number,
    holders,
    listed,
    polled,
    shard_nodes,
    stored,
)
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
    report,
    submit,
)
from tests.fakes import eventually
from tests.redis_server import RestartableRedis
from tests.snapshot_helpers import go_file, lose_redis_data
from workers import context, tasks

KEY = "ui-key"


def test_an_unsharded_deployment_upgrades_to_three_shards_and_keeps_its_count(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    unsharded = make_client(max_jobs_per_node=10)
    register(unsharded, shard_nodes(0)[0])  # a node of shard 0 before and after
    old = [submit(unsharded, command=f"old {i}")["job_id"] for i in range(5)]
    assert old == [f"job-{n}" for n in range(1, 6)]
    assert_json(report(unsharded, "job-1", "running"))
    before = {job_id: assert_json(unsharded.get(f"/jobs/{job_id}")) for job_id in old}

    settings = make_settings(shards=SHARDS, max_jobs_per_node=10)
    api = make_client(settings)
    for job_id in old:  # found where they were: shard 0's, below the recorded floor
        assert assert_json(api.get(f"/jobs/{job_id}")) == before[job_id]
        assert holders(rclient, settings, job_id) == [0]
    assert polled(api, before["job-2"]["node_id"]) == old[1:]
    assert_json(report(api, "job-2", "running"))
    for job_id in ("job-1", "job-2"):  # running across the upgrade, and since
        assert assert_json(report(api, job_id, "done", exit_code=0))["status"] == "done"

    register(api, shard_nodes(1)[0], shard_nodes(2)[0])
    new = [submit(api, command=f"new {i}")["job_id"] for i in range(9)]
    assert len(set(new)) == 9 and not set(new) & set(old)
    numbers = [job_number(job_id) or 0 for job_id in new]
    assert min(numbers) > 5 and {n % SHARDS for n in numbers} == {0, 1, 2}
    for job_id, number in zip(new, numbers, strict=True):  # above the floor: N mod 3's
        assert holders(rclient, settings, job_id) == [number % SHARDS]
    assert listed(api) == by_number(old + new)
    assert sum(map(len, stored(rclient, settings))) == 14

    # A restart with the same count is served as before; another count is refused.
    again = make_client(settings)
    assert listed(again) == by_number(old + new)
    for count in (2, 1):  # back to unsharded too: its jobs above the floor would be lost
        with pytest.raises(LayoutChanged):
            make_client(shards=count)
    assert listed(api) == by_number(old + new)


def test_after_the_upgrade_a_node_of_another_shard_is_offered_its_queued_jobs(
    make_client: ClientFactory,
) -> None:
    """A node the unsharded deployment queued jobs for belongs to shard 1 once sharded: its
    agent heartbeats, registers again on a 404 (README, Agent) and polls, and is offered
    the jobs it was queued before the upgrade."""
    unsharded = make_client(max_jobs_per_node=10)
    node = shard_nodes(1)[0]
    register(unsharded, node)
    old = [submit(unsharded, command=f"old {i}")["job_id"] for i in range(2)]
    api = make_client(shards=SHARDS, max_jobs_per_node=10)
    if api.post("/nodes/heartbeat", json={"id": node}).status_code == 404:
        register(api, node)
    assert polled(api, node) == old


@BOTH_FRONTS
@pytest.mark.timeout(60)  # the start hanging on an unreachable Redis fails here, not at 300 s
def test_redis_unreachable_at_the_start_is_503_until_it_answers(
    make_client: ClientFactory, make_settings: SettingsFactory, restartable_redis: RestartableRedis
) -> None:
    restartable_redis.kill()
    settings = make_settings(shards=SHARDS, redis_url=restartable_redis.url)
    api = make_client(settings)
    requests = [
        ("POST", "/jobs", {"command": "x"}),
        ("GET", "/jobs", None),
        ("GET", "/jobs?node_id=n1&status=pending", None),
        ("GET", "/jobs/job-1", None),
        ("PATCH", "/jobs/job-1", {"status": "running"}),
        ("POST", "/nodes/register", {"id": "n1"}),
        ("GET", "/nodes", None),
    ]
    for method, path, body in requests:
        response = api.request(method, path, json=body)
        assert_text_error(response, 503, "store unavailable")
    assert api.get("/health").status_code == 200

    restartable_redis.start()
    # Each shard's worker settles the restore question the API could not (DEPLOYMENT.md,
    # Durability).
    for shard in range(SHARDS):
        restore_if_empty(settings.for_shard(shard))
    node = shard_nodes(2)[0]
    eventually(lambda: api.post("/nodes/register", json={"id": node}).status_code == 201)
    job = submit(api, command="after the outage")
    assert LAYOUT.job_shard(job["job_id"]) == 2 and job["node_id"] == node
    assert polled(api, node) == [job["job_id"]]


def ids_of(page: str) -> list[str]:
    return re.findall(r'<td[^>]*><a href="/ui/jobs/(job-\d+)[?"]', page)


def test_the_ui_lists_and_searches_every_shards_jobs(make_client: ClientFactory) -> None:
    api: TestClient = make_client(shards=SHARDS, api_key=KEY)
    headers = {"Authorization": f"Bearer {KEY}"}
    nodes = [shard_nodes(k)[0] for k in range(SHARDS)]
    for node in nodes:
        body = {"id": node, "hostname": node, "role": "compute"}
        assert api.post("/nodes/register", json=body, headers=headers).status_code == 201
    made = [
        assert_json(api.post("/jobs", json={"command": f"echo {i}"}, headers=headers), 201)
        for i in range(6)
    ]
    ids = by_number(job["job_id"] for job in made)
    assert {LAYOUT.job_shard(job_id) for job_id in ids} == {0, 1, 2}
    assert api.post("/ui/login", data={"key": KEY}).status_code == 200
    page = api.get("/ui/jobs")
    assert page.status_code == 200, page.text
    assert ids_of(page.text) == ids[::-1]  # newest first, every shard's
    on_two = next(job for job in made if LAYOUT.job_shard(job["job_id"]) == 2)
    found = api.get("/ui/jobs", params={"q": on_two["command"]})
    assert ids_of(found.text) == [on_two["job_id"]]
    pending = api.get("/ui/jobs", params={"status": "pending", "q": "echo"})
    assert ids_of(pending.text) == ids[::-1]
    assert api.get(f"/ui/jobs/{on_two['job_id']}").status_code == 200


def searched_through(api: TestClient, query: str) -> list[str]:
    """Every page of the UI's search for `query`, following Older and Search older."""
    seen, url = [], f"/ui/jobs?q={query}"
    while url:
        page = api.get(url)
        assert page.status_code == 200, page.text
        seen += ids_of(page.text)
        more = re.search(r'id="(?:older|search-older)" href="([^"]+)"', page.text)
        url = more.group(1).replace("&amp;", "&") if more else ""
    return seen


@pytest.mark.parametrize("on", [[1], [0, 1, 2]])
def test_the_ui_search_pages_through_every_shard_skipping_none(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, on: list[int]
) -> None:
    """A page ends where a shard with more to look through stopped: the job it stopped at,
    found, is on that page (it was left out, and the next page went on from before it)."""
    monkeypatch.setattr(ui_jobs, "PAGE_SIZE", 5)
    monkeypatch.setattr(ui_jobs, "SEARCH_SCAN", 4)
    api = make_client(shards=SHARDS)
    register(api, *(shard_nodes(k)[0] for k in on))
    made = [submit(api, command=f"hit {i}" if i % 5 else "miss")["job_id"] for i in range(24)]
    hits = by_number(job for i, job in enumerate(made) if i % 5)[::-1]
    assert searched_through(api, "hit") == hits


def test_the_ui_search_of_three_shards_reaches_an_old_snapshots_rows(
    make_client: ClientFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    go_file(path := tmp_path / "go.db")
    api = make_client(make_settings(scheduler_db=str(path), shards=SHARDS))
    page = api.get("/ui/jobs?q=echo")
    assert page.status_code == 200, page.text
    assert ids_of(page.text) == ["job-99"] and 'href="/ui/jobs/not-a-job"' in page.text


def snapshot_every_shard(settings: Settings) -> None:
    """What each shard's worker does each period: its jobs into its own file."""
    for shard in range(SHARDS):
        context.configure(settings.for_shard(shard))
        try:
            tasks.snapshot(period=1)
        finally:
            context.close()


def test_an_upgraded_deployment_that_loses_redis_comes_back_whole_from_its_files(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """The layout's record is lost with Redis: the floor is found again from shard 0's jobs
    (store/jobs.py _floors), so every job, made before the upgrade or after on any shard,
    is found again, and new ids collide with none."""
    unsharded = make_client()
    register(unsharded, *shard_nodes(0)[:1])
    old = [submit(unsharded, command=f"old {i}")["job_id"] for i in range(5)]
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    new = [submit(api, command=f"new {i}")["job_id"] for i in range(9)]
    assert {LAYOUT.job_shard(job_id) for job_id in new} == {0, 1, 2}
    snapshot_every_shard(settings)
    for shard in range(SHARDS):
        lose_redis_data(rclient, settings.for_shard(shard).redis_prefix)

    back = make_client(settings)  # its start restores each shard from its own file
    for job_id in old + new:
        assert assert_json(back.get(f"/jobs/{job_id}"))["job_id"] == job_id
    assert listed(back, "") == by_number(old + new)
    register(back, *(shard_nodes(k)[0] for k in range(SHARDS)))  # nodes live in Redis only
    later = [submit(back, command=f"later {i}")["job_id"] for i in range(6)]
    assert not set(later) & set(old + new)
    for job_id in later:
        assert assert_json(back.get(f"/jobs/{job_id}"))["job_id"] == job_id


def test_a_start_with_another_count_restores_nothing_into_that_counts_shards(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """Shards 1 and 2 lost their data, shard 0 (with the record) did not: a start with 2
    shards is refused before it restores a file into a shard of its own layout."""
    settings = make_settings(shards=SHARDS)
    api = make_client(settings)
    register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
    [submit(api, command=f"c{i}") for i in range(6)]
    snapshot_every_shard(settings)  # scheduler-1.db and scheduler-2.db now exist
    for shard in (1, 2):
        lose_redis_data(rclient, settings.for_shard(shard).redis_prefix)
    two = make_settings(shards=2)
    with pytest.raises(LayoutChanged), TestClient(create_app(two)):
        pass
    for shard in (1, 2):
        assert not rclient.exists(Keys(settings.for_shard(shard).redis_prefix).all_jobs)
    assert not rclient.exists(Keys(two.for_shard(1).redis_prefix).all_jobs)

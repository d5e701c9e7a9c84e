"""GET /jobs?schedule=NAME (issue 38): the jobs a schedule's firing made, from the schedule's
own index (keys.py schedule_jobs), written by the create script, left by the retention's
prune, rebuilt by a restore, and kept when the schedule is deleted; on shard 0 of a sharded
deployment, where the schedules fire."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from scheduler.cli import listing as cli_listing
from scheduler.client import Client
from scheduler.snapshot.restore import restore_from_file, restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from tests.conftest import (
    ClientFactory,
    CtxFactory,
    assert_json,
    register,
    report,
    submit,
)
from tests.snapshot_helpers import lose_redis_data
from workers import firing
from workers.context import Context

EVERY = 10


@pytest.fixture
def ctx_overrides() -> dict[str, Any]:
    # Nodes stay live for the injected times; the whole test within one grace.
    return {"node_ttl_secs": 86400, "max_jobs_per_node": 1000, "schedule_grace_secs": 86400}


@pytest.fixture
def ctx(make_ctx: CtxFactory) -> Context:
    return make_ctx()


@pytest.fixture
def api(make_client: ClientFactory, ctx: Context) -> TestClient:
    client = make_client(ctx.settings)
    register(client, "n1")
    return client


def add(api: TestClient, name: str) -> None:
    body = {"name": name, "every_secs": EVERY, "job": {"command": f"run {name}"}}
    assert api.post("/schedules", json=body).status_code == 201


def fire_ticks(ctx: Context, api: TestClient, count: int) -> None:
    """`count` ticks of every schedule fired, each tick at its own time."""
    [(_, first)] = ctx.redis.zrange(ctx.keys.schedules_due, 0, 0, withscores=True)
    for i in range(count):
        asyncio.run(firing.fire_due(ctx, first + i * EVERY + 0.5, firing.node_source(ctx.settings)))


def listed(api: TestClient, query: str) -> list[str]:
    return [job["job_id"] for job in assert_json(api.get(f"/jobs?{query}"))]


def made_by(api: TestClient, name: str) -> list[str]:
    return [j["job_id"] for j in assert_json(api.get("/jobs")) if j.get("schedule") == name]


def test_a_schedules_jobs_are_listed_and_paged_as_every_listing(
    ctx: Context, api: TestClient
) -> None:
    add(api, "a")
    add(api, "b")
    submit(api, command="by hand")
    fire_ticks(ctx, api, 5)
    submit(api, command="by hand too")
    mine = made_by(api, "a")
    assert len(mine) == 5 and len(made_by(api, "b")) == 5
    assert listed(api, "schedule=a") == listed(api, "schedule=a&order=oldest") == mine
    assert listed(api, "schedule=a&order=newest") == mine[::-1]
    assert listed(api, "schedule=a&limit=2") == mine[:2]
    assert listed(api, f"schedule=a&limit=2&after={mine[1]}") == mine[2:4]
    assert listed(api, f"schedule=a&order=newest&before={mine[3]}&limit=2") == mine[2:0:-1]
    assert listed(api, "schedule=a&order=newest&before=job-0") == []
    jobs = assert_json(api.get("/jobs?schedule=b"))
    assert {(j["schedule"], j["command"]) for j in jobs} == {("b", "run b")}
    assert jobs == [assert_json(api.get(f"/jobs/{j['job_id']}")) for j in jobs]  # whole records
    assert listed(api, "schedule=nobody") == []  # no such schedule: none made (not a 404)
    index = ctx.redis.zrange(ctx.keys.schedule_jobs("a"), 0, -1, withscores=True)
    assert [(m.decode(), int(s)) for m, s in index] == [(j, int(j[4:])) for j in mine]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("schedule=a/b", "invalid schedule: use 1 to 128 of A-Z a-z 0-9 . _ -"),
        ("schedule=" + "x" * 129, "invalid schedule: use 1 to 128 of A-Z a-z 0-9 . _ -"),
        ("schedule=a&status=done", "invalid schedule: use it without node_id and status"),
        ("schedule=a&node_id=n1", "invalid schedule: use it without node_id and status"),
        # With a schedule it is a listing, never the agent's poll.
        ("schedule=a&node_id=n1&status=pending", "invalid schedule: use it without node_id"),
        ("schedule=a&after=7", "invalid after: use a job id like job-42"),
        ("schedule=a&schedule=b", 'parameter "schedule" given more than once'),
    ],
)
def test_a_bad_schedule_query_is_a_400_naming_the_rule(
    api: TestClient, query: str, message: str
) -> None:
    response = api.get(f"/jobs?{query}")
    assert response.status_code == 400, response.text
    assert message in response.text


def test_a_deleted_schedules_jobs_stay_listed_as_their_records_say(
    ctx: Context, api: TestClient
) -> None:
    add(api, "a")
    fire_ticks(ctx, api, 2)
    mine = made_by(api, "a")
    assert api.delete("/schedules/a").status_code == 204
    assert listed(api, "schedule=a") == mine
    add(api, "a")  # made again under the name: its jobs follow the old one's
    fire_ticks(ctx, api, 1)
    assert listed(api, "schedule=a") == made_by(api, "a") and len(made_by(api, "a")) == 3


def test_the_retention_prune_takes_a_job_out_of_its_schedules_index(
    make_ctx: CtxFactory, make_client: ClientFactory
) -> None:
    ctx = make_ctx(node_ttl_secs=86400, schedule_grace_secs=86400, job_retention_secs=60)
    api = make_client(ctx.settings)
    register(api, "n1")
    add(api, "a")
    fire_ticks(ctx, api, 3)
    first, *rest = made_by(api, "a")
    assert report(api, first, "running").status_code == 200
    assert report(api, first, "done", exit_code=0).status_code == 200
    snapshot_once(ctx.settings)
    assert ctx.store.run(ops.upkeep.prune_finished(time.time() + 120)) == [first]
    assert listed(api, "schedule=a") == rest
    assert ctx.redis.zscore(ctx.keys.schedule_jobs("a"), first) is None


def test_a_restore_rebuilds_each_schedules_index_from_the_records(
    ctx: Context, api: TestClient, rclient: redis.Redis, db: Path
) -> None:
    add(api, "a")
    add(api, "b")
    fire_ticks(ctx, api, 3)
    submit(api, command="by hand")
    before = {name: listed(api, f"schedule={name}") for name in ("a", "b")}
    index = ctx.redis.zrange(ctx.keys.schedule_jobs("a"), 0, -1, withscores=True)
    snapshot_once(ctx.settings)
    lose_redis_data(rclient, ctx.settings.redis_prefix)
    assert restore_if_empty(ctx.settings)
    assert {name: listed(api, f"schedule={name}") for name in ("a", "b")} == before
    assert ctx.redis.zrange(ctx.keys.schedule_jobs("a"), 0, -1, withscores=True) == index
    # Loaded again over the jobs it holds (--force): each taken out of its index first.
    restore_from_file(ctx.settings, str(db), force=True)
    assert ctx.redis.zrange(ctx.keys.schedule_jobs("a"), 0, -1, withscores=True) == index


def test_a_sharded_deployment_lists_a_schedules_jobs_from_shard_zero(
    make_ctx: CtxFactory, make_client: ClientFactory, rclient: redis.Redis
) -> None:
    ctx = make_ctx(node_ttl_secs=86400, schedule_grace_secs=86400, shards=3)
    api = make_client(ctx.settings)
    register(api, *(f"n{i}" for i in range(1, 10)))  # nodes on every shard
    add(api, "a")
    fire_ticks(ctx, api, 4)
    by_hand = [submit(api, command=f"by hand {i}")["job_id"] for i in range(6)]
    mine = made_by(api, "a")
    assert len(mine) == 4 and not set(mine) & set(by_hand)
    assert listed(api, "schedule=a") == mine
    assert listed(api, "schedule=a&order=newest&limit=3") == mine[:0:-1]
    shard0 = Keys(ctx.settings.for_shard(0).redis_prefix)
    assert [m.decode() for m in rclient.zrange(shard0.schedule_jobs("a"), 0, -1)] == mine


def test_the_ui_links_each_schedule_to_the_jobs_it_made(ctx: Context, api: TestClient) -> None:
    add(api, "a")
    add(api, "b")
    fire_ticks(ctx, api, 2)
    page = api.get("/ui/schedules").text
    assert '<a id="jobs-a" href="/ui/jobs?schedule=a">all its jobs</a>' in page
    shown = api.get("/ui/jobs?schedule=a").text
    assert 'jobs made by schedule <a id="made-by" href="/ui/schedules#row-a">a</a>' in shown
    for job_id in made_by(api, "a"):
        assert f">{job_id}</a>" in shown
    for job_id in made_by(api, "b"):
        assert f">{job_id}</a>" not in shown
    older = api.get("/ui/jobs?schedule=a&before=999").text  # its pages keep the schedule
    assert '<a id="newest" href="/ui/jobs?schedule=a">Newest</a>' in older
    paused = api.get("/ui/jobs?schedule=a&refresh=off").text
    assert 'href="/ui/jobs?refresh=off">all jobs</a>' in paused
    for query, rule in (
        ("schedule=a/b", "use 1 to 128 of A-Z a-z 0-9 . _ -"),
        ("schedule=a&status=done", "use it without status, node_id and q"),
    ):
        response = api.get(f"/ui/jobs?{query}")
        assert response.status_code == 400 and f"invalid schedule: {rule}" in response.text


class Through(httpx.BaseTransport):
    """The CLI's client's requests sent to the in-process API."""

    def __init__(self, api: TestClient) -> None:
        self.api = api

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.api.request(
            request.method, str(request.url), content=request.read(), headers=request.headers
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def test_scheduler_list_schedule_pages_a_schedules_jobs(ctx: Context, api: TestClient) -> None:
    add(api, "a")
    add(api, "b")
    fire_ticks(ctx, api, 3)
    client = Client("http://testserver", transport=Through(api))
    args = argparse.Namespace(
        node_id="",
        status="",
        schedule="a",
        namespace="",
        limit=2,
        newest=False,
        after="",
        before="",
        json=True,
    )
    out, err = io.StringIO(), io.StringIO()
    assert cli_listing.list_jobs(args, client, out, err) == 0
    mine = made_by(api, "a")
    assert [job["job_id"] for job in json.loads(out.getvalue())] == mine[:2]
    assert err.getvalue() == f"more: scheduler list --schedule a --limit 2 --after {mine[1]}\n"

"""The worker's `promote` task (every PROMOTE_INTERVAL_SECS): delayed jobs become pending once
due, each once, the endings left to settle are settled, and the run is recorded and counted
like every periodic task's."""

from __future__ import annotations

from typing import Any

from tests.conftest import CtxFactory, assert_json, register
from tests.fakes import eventually
from workers import tasks
from workers.schedule import periodic_tasks


def test_promote_makes_due_jobs_pending(make_ctx: CtxFactory, make_client: Any) -> None:
    ctx = make_ctx()
    api = make_client(ctx.settings)
    register(api, "n1")
    soon = assert_json(api.post("/jobs", json={"command": "soon", "delay_secs": 0.2}), 201)
    later = assert_json(api.post("/jobs", json={"command": "later", "delay_secs": 3600}), 201)

    def promoted() -> int:
        return tasks.promote(period=1)

    assert eventually(promoted) == 1  # once soon is due; later stays
    assert assert_json(api.get(f"/jobs/{soon['job_id']}"))["status"] == "pending"
    assert assert_json(api.get(f"/jobs/{later['job_id']}"))["status"] == "delayed"
    assert tasks.promote(period=2) == 0
    assert int(ctx.redis.hget(ctx.keys.stats, "promoted") or 0) == 1


def test_promote_runs_every_second_by_default(make_ctx: CtxFactory) -> None:
    by_name = {task.name: task for task in periodic_tasks(make_ctx().settings)}
    assert by_name["promote"].interval == 1.0
    assert by_name["promote"].func == "workers.tasks.promote"


def test_promote_settles_every_ending_left_in_one_run(
    make_ctx: CtxFactory, make_client: Any
) -> None:
    """An ending too large for the request's script (a chain of 300: store/scripts/
    endings.py): the next promote run settles all of it, piece after piece, not one piece a
    second (issue 36)."""
    ctx = make_ctx()
    api = make_client(ctx.settings)
    register(api, "n1")
    chain = [assert_json(api.post("/jobs", json={"command": "root"}), 201)["job_id"]]
    for _ in range(300):
        body = {"command": "link", "after": [chain[-1]]}
        chain.append(assert_json(api.post("/jobs", json=body), 201)["job_id"])
    assert_json(api.delete(f"/jobs/{chain[0]}"))
    assert assert_json(api.get(f"/jobs/{chain[-1]}"))["status"] == "waiting"
    tasks.promote(period=1)
    assert ctx.redis.zcard(ctx.keys.endings) == 0
    assert int(ctx.redis.hget(ctx.keys.stats, "settle_calls") or 0) > 1
    ended = [assert_json(api.get(f"/jobs/{job_id}")) for job_id in chain[1:]]
    assert {(job["status"], job["failure_reason"]) for job in ended} == {
        ("failed", "dependency_failed")
    }

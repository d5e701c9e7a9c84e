"""The worker's `promote` task (every PROMOTE_INTERVAL_SECS): delayed jobs become pending once
due, each once, and the run is recorded and counted like every periodic task's."""

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

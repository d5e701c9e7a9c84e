"""A schedule's tick past its namespace's pending quota (docs/GUIDE.md, Quotas): nothing is
made and the tick stays due, counted unplaced; it fires once the namespace has room."""

from __future__ import annotations

import time
from collections import Counter

from starlette.testclient import TestClient

from scheduler.models.access_key import ADMIN
from scheduler.models.quota import Quota
from scheduler.store.scripts import quotas
from tests.workers.test_firing import add, api, ctx, ctx_overrides, fire, jobs, stored
from workers.context import Context

__all__ = ["api", "ctx", "ctx_overrides"]  # the fixtures, as test_firing.py has them


def test_a_tick_past_the_pending_quota_waits_then_fires(ctx: Context, api: TestClient) -> None:
    ctx.store.run(quotas.set_quota("team-a", Quota(pending=1), time.time(), ADMIN))
    made = api.post("/jobs", json={"command": "x", "namespace": "team-a"})
    assert made.status_code == 201
    add(api, job={"command": "tick", "namespace": "team-a"})
    tick = stored(ctx).next_tick
    assert fire(ctx, tick) == Counter(schedule_unplaced=1)
    assert len(jobs(api)) == 1 and stored(ctx).next_tick == tick
    assert api.delete(f"/jobs/{made.json()['job_id']}").status_code == 200
    assert fire(ctx, tick + 1) == Counter(schedule_fired=1)
    assert [job["command"] for job in jobs(api) if job["status"] == "pending"] == ["tick"]

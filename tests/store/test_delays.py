"""Delayed jobs and the retry policy (issue 23, items 2 and 4), against a real Redis: a job
submitted with `delay_secs` or `run_at` waits `delayed`, out of every node's queue, until the
worker's PROMOTE_DUE makes it pending on a live node; a retry waits out its backoff the same
way; a job's own max_retries bounds its retries (timeouts included)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.wire import parse_rfc3339, rfc3339
from scheduler.store.keys import Keys
from scheduler.store.scripts.library import assemble, parse
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    last_heard,
    register,
    report,
    submit,
)
from tests.store.test_endings import until_subscribed

TTL = 30


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=TTL, max_jobs_per_node=10, job_timeout_secs=60)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "a")
    return client


def poll(api: TestClient, node: str = "a") -> list[str]:
    jobs = assert_json(api.get("/jobs", params={"node_id": node, "status": "pending"}))
    return [j["job_id"] for j in jobs]


def delayed_index(rclient: redis.Redis, settings: Settings) -> dict[str, float]:
    entries = rclient.zrange(Keys(settings.redis_prefix).delayed, 0, -1, withscores=True)
    return {member.decode(): score for member, score in cast(Any, entries)}


@BOTH_FRONTS
def test_a_delayed_job_is_out_of_every_queue_until_it_is_due(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    before = time.time()
    job = assert_json(api.post("/jobs", json={"command": "later", "delay_secs": 3600}), 201)
    assert job["status"] == "delayed"
    due = parse_rfc3339(job["run_at"])
    assert before + 3600 <= due <= time.time() + 3600
    assert delayed_index(rclient, settings) == {job["job_id"]: pytest.approx(due, abs=1e-3)}
    assert poll(api) == []  # the original agent's poll never sees it
    listed = assert_json(api.get("/jobs", params={"status": "delayed"}))
    assert [j["job_id"] for j in listed] == [job["job_id"]]
    # A claim of a job not due is refused (no agent was given it).
    assert_text_error(report(api, job["job_id"], "running"), 409, "job is not due yet")

    assert store.promote_due(due - 1) == []  # not yet
    assert store.promote_due(due) == [job["job_id"]]
    promoted = assert_json(api.get(f"/jobs/{job['job_id']}"))
    assert (promoted["status"], promoted["node_id"]) == ("pending", "a")
    assert promoted["run_at"] == job["run_at"]  # when its wait ended
    assert delayed_index(rclient, settings) == {}
    assert poll(api) == [job["job_id"]]
    assert store.promote_due(due + 60) == []  # once


@pytest.mark.parametrize(
    "run_at, delayed",
    [
        ("2000-01-01T00:00:00Z", False),  # past: due now
        ("2999-01-01T00:00:00Z", None),  # beyond 366 days: refused
        ("+3600", True),  # an hour ahead, written with an offset
    ],
)
def test_run_at_in_any_rfc3339_form(api: TestClient, run_at: str, delayed: bool | None) -> None:
    if run_at == "+3600":
        ahead = datetime.fromtimestamp(time.time() + 3600, UTC).astimezone()
        run_at = ahead.isoformat()
    response = api.post("/jobs", json={"command": "x", "run_at": run_at})
    if delayed is None:
        assert_text_error(response, 400, "invalid run_at: at most 366 days ahead")
        return
    job = assert_json(response, 201)
    assert job["status"] == ("delayed" if delayed else "pending")
    if delayed:
        assert job["run_at"].endswith("Z")  # stored in UTC, as every stamp
        assert parse_rfc3339(job["run_at"]) == pytest.approx(parse_rfc3339(run_at), abs=1e-3)
    else:
        assert "run_at" not in job


@pytest.mark.parametrize(
    "body, message",
    [
        ({"command": "x", "run_at": "tomorrow"}, "invalid run_at 'tomorrow': use RFC 3339"),
        ({"command": "x", "run_at": "2030-01-01T00:00:00Z", "delay_secs": 5}, "use run_at or"),
    ],
)
def test_a_bad_time_is_400_and_creates_nothing(
    api: TestClient, body: dict[str, Any], message: str
) -> None:
    response = api.post("/jobs", json=body)
    assert response.status_code == 400 and response.text.startswith(message)
    assert assert_json(api.get("/jobs")) == []


@pytest.mark.parametrize(
    "field, value",
    [("delay_secs", -1), ("delay_secs", 400 * 86400), ("delay_secs", "5"), ("max_retries", 101),
     ("max_retries", -1), ("retry_backoff_secs", 86401)],
)  # fmt: skip
def test_out_of_range_policy_fields_are_400_naming_the_field(
    api: TestClient, field: str, value: Any
) -> None:
    response = api.post("/jobs", json={"command": "x", field: value})
    assert response.status_code == 400
    assert field in response.headers["x-error-detail"]
    assert assert_json(api.get("/jobs")) == []


def test_a_delayed_job_is_cancelled_at_once(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    job = assert_json(api.post("/jobs", json={"command": "x", "delay_secs": 60}), 201)
    cancelled = assert_json(api.delete(f"/jobs/{job['job_id']}"))
    assert (cancelled["status"], cancelled["failure_reason"]) == ("failed", "cancelled")
    assert delayed_index(rclient, settings) == {}
    assert store.promote_due(time.time() + 120) == []


def test_a_due_job_whose_node_died_goes_to_a_live_one(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "b")
    job = assert_json(api.post("/jobs", json={"command": "x", "delay_secs": 60}), 201)
    placed, other = job["node_id"], ({"a", "b"} - {job["node_id"]}).pop()
    now = time.time() + 61
    last_heard(rclient, settings, placed, now - TTL - 1)
    last_heard(rclient, settings, other, now)
    assert store.promote_due(now) == [job["job_id"]]
    assert assert_json(api.get(f"/jobs/{job['job_id']}"))["node_id"] == other
    assert poll(api, other) == [job["job_id"]]


def test_a_long_poll_is_woken_when_its_delayed_job_is_due(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    job = assert_json(api.post("/jobs", json={"command": "x", "delay_secs": 60}), 201)
    with ThreadPoolExecutor(max_workers=1) as pool:
        params = {"node_id": "a", "status": "pending", "wait": 60}
        waiting = pool.submit(api.get, "/jobs", params=params)
        until_subscribed(rclient, Keys(settings.redis_prefix).node_channel("a"))
        assert store.promote_due(time.time() + 61) == [job["job_id"]]
        # Woken by the promotion: the poll's own wait (60 s) would outlast this.
        answered = waiting.result(timeout=50).json()
    assert [j["job_id"] for j in answered] == [job["job_id"]]


# The retry policy.


def claim_and_fail(api: TestClient, job_id: str, code: int = 1) -> dict[str, Any]:
    assert_json(report(api, job_id, "running"))
    return dict(assert_json(report(api, job_id, "failed", exit_code=code)))


def test_a_jobs_own_max_retries_bounds_its_retries(api: TestClient) -> None:
    job = submit(api, command="flaky", max_retries=3)
    for attempt in range(1, 4):
        retried = claim_and_fail(api, job["job_id"])
        assert (retried["status"], retried["retry_count"]) == ("pending", attempt)
    ended = claim_and_fail(api, job["job_id"])
    assert (ended["status"], ended["retry_count"]) == ("failed", 3)
    # Without one, the deployment's MAX_JOB_RETRIES (1): the original's rule.
    plain = submit(api, command="plain")
    assert claim_and_fail(api, plain["job_id"])["status"] == "pending"
    assert claim_and_fail(api, plain["job_id"])["status"] == "failed"
    # max_retries 0: no retry.
    once = submit(api, command="once", max_retries=0)
    assert claim_and_fail(api, once["job_id"])["status"] == "failed"


def test_a_retry_waits_out_its_backoff_doubling_with_jitter(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    job = submit(api, command="flaky", max_retries=3, retry_backoff_secs=10)
    for attempt in range(3):
        retried, (low, high) = timed_retry(api, job["job_id"])
        assert retried["status"] == "delayed" and "exit_code" not in retried
        base = 10 * 2**attempt
        # Equal jitter: half fixed, half spread, in [base/2, base] (5, 10, 20, ... to 40):
        # each retry waits at least as long as the last.
        assert high >= base / 2 - 0.001 and low <= base + 0.001, (low, high)
        assert poll(api) == []
        # Due at its run_at (to the microsecond its text holds).
        assert store.promote_due(parse_rfc3339(retried["run_at"]) + 1e-6) == [job["job_id"]]
    assert claim_and_fail(api, job["job_id"])["status"] == "failed"


def timed_retry(api: TestClient, job_id: str) -> tuple[dict[str, Any], tuple[float, float]]:
    """A failed attempt retried with a backoff, and the bounds of the wait it was given: the
    scheduler read its clock between `before` and `after`, so the wait (run_at minus that
    reading) lies in [due - after, due - before], however slow the machine."""
    before = time.time()
    retried = claim_and_fail(api, job_id, code=7)
    after = time.time()
    due = parse_rfc3339(retried["run_at"])
    return retried, (due - after, due - before)


def test_the_backoff_is_capped(make_client: ClientFactory, make_settings: SettingsFactory) -> None:
    api = make_client(make_settings(retry_backoff_secs=100, retry_backoff_cap_secs=30))
    register(api, "a")
    job = submit(api, command="x")
    _, (low, high) = timed_retry(api, job["job_id"])
    # The deployment's backoff (100 s), within its cap (30 s), equal jitter: 15 to 30 s.
    assert high >= 15 - 0.001 and low <= 30 + 0.001, (low, high)


def test_a_timeout_is_retried_only_under_a_jobs_own_policy(
    api: TestClient, store: SyncJobStore
) -> None:
    own = submit(api, command="slow", max_retries=1)
    plain = submit(api, command="slow too")
    for job in (own, plain):
        assert_json(report(api, job["job_id"], "running"))
    assert sorted(store.sweep_timeouts(time.time() + 61)) == sorted(
        [own["job_id"], plain["job_id"]]
    )
    retried = assert_json(api.get(f"/jobs/{own['job_id']}"))
    assert (retried["status"], retried["retry_count"]) == ("pending", 1)
    assert retried["stderr"] == "job timed out"
    ended = assert_json(api.get(f"/jobs/{plain['job_id']}"))
    assert (ended["status"], ended["failure_reason"]) == ("failed", "timed_out")
    # Out of retries, a timeout ends it.
    assert_json(report(api, own["job_id"], "running"))
    assert store.sweep_timeouts(time.time() + 61) == [own["job_id"]]
    assert assert_json(api.get(f"/jobs/{own['job_id']}"))["failure_reason"] == "timed_out"


def test_a_lost_nodes_job_retries_after_its_backoff(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "b")
    job = submit(api, command="x", retry_backoff_secs=60)
    assert_json(report(api, job["job_id"], "running"))
    node = assert_json(api.get(f"/jobs/{job['job_id']}"))["node_id"]
    now = time.time() + 4 * TTL + 1
    last_heard(rclient, settings, node, time.time() - 4 * TTL - 1)
    last_heard(rclient, settings, ({"a", "b"} - {node}).pop(), now)
    [lost] = store.lose_running(now)
    assert (lost.job_id, lost.status) == (job["job_id"], "delayed")
    assert job["job_id"] in delayed_index(rclient, settings)


def test_a_delayed_job_survives_a_snapshot_and_restore(
    api: TestClient, settings: Settings, rclient: redis.Redis
) -> None:
    from scheduler.snapshot.restore import restore_if_empty
    from scheduler.snapshot.writer import snapshot_once
    from tests.snapshot_helpers import lose_redis_data

    job = assert_json(api.post("/jobs", json={"command": "x", "delay_secs": 600}), 201)
    assert snapshot_once(settings) >= 1
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert assert_json(api.get(f"/jobs/{job['job_id']}")) == job
    due = delayed_index(rclient, settings)[job["job_id"]]
    assert due == pytest.approx(parse_rfc3339(job["run_at"]), abs=1e-3)


@pytest.mark.parametrize(
    "epoch",
    [0.0, 951782400.0, 951868799.999999, 4107542400.5, 1764806400.123456, 1735689599.9999996],
    ids=["epoch", "2000-02-29", "2000-02-29 end", "2100-03-01", "2025-12-04", "rounds up"],
)
def test_the_lua_rfc3339_writes_what_python_writes(
    epoch: float, rclient: redis.Redis, settings: Settings
) -> None:
    body = parse('--- @include "rfc3339"\nreturn rfc3339(tonumber(epoch))')
    text = assemble("T", ("epoch",), "", body)
    lua = rclient.eval(text, 1, Keys(settings.redis_prefix).root, repr(epoch))
    assert lua.decode() == rfc3339(epoch)


def test_a_run_at_without_a_zone_is_400(api: TestClient) -> None:
    for run_at in ("2030-01-01T00:00:00", "2030-01-01"):
        response = api.post("/jobs", json={"command": "x", "run_at": run_at})
        assert response.status_code == 400 and "use RFC 3339 with a zone" in response.text

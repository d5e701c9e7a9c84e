"""An ending settled in pieces (issue 36, finding 5): no script settles a whole cascade. The
script that ends a job settles its waiters up to a bounded budget of work (store/scripts/
endings.py) and leaves the rest in {P}:endings, which SETTLE_ENDINGS (the workers' promote
task) settles in calls of the same bound. Against a real Redis: every waiter ends exactly
once, each call spends at most the budget (the units it reports), and the waiters stay right
whatever happens between the pieces. And a retry by hand within bounds: it never makes more
than MAX_WAITERS jobs wait for one (a new job's `after` is refused there too), and a bulk
retry of jobs that each wait for many is split into calls of bounded work, its answer the
same."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.nodes.placement import Placement
from scheduler.snapshot.restore import restore_from_file, restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import create as create_scripts
from scheduler.store.scripts import retry as retry_scripts
from scheduler.store.scripts.endings import SETTLE_UNITS
from scheduler.store.scripts.settling import settle_endings
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
    submit,
)
from tests.snapshot_helpers import lose_redis_data
from tests.store.test_dependencies import job, run

# More waiters than one request's budget ends: each ending costs ENDED_UNITS of SETTLE_UNITS.
WIDE = 200


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=10, max_job_retries=0)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "a")
    return client


def after(api: TestClient, *deps: str) -> str:
    made = assert_json(api.post("/jobs", json={"command": "w", "after": list(deps)}), 201)
    return str(made["job_id"])


def settle_all(store: SyncJobStore) -> int:
    """SETTLE_ENDINGS until none is left, as the workers' task calls it; each call within
    the budget. Returns the calls made."""
    calls = 0
    while True:
        settled = store.run(settle_endings(time.time()))
        assert 0 <= settled.units <= SETTLE_UNITS
        calls += 1
        if not settled.left:
            return calls


def statuses(api: TestClient, ids: list[str]) -> Counter[str]:
    return Counter(job(api, job_id)["status"] for job_id in ids)


def events(rclient: redis.Redis, settings: Settings) -> Counter[str]:
    """How many events the outbox holds for each job."""
    entries = rclient.lrange(Keys(settings.redis_prefix).outbox, 0, -1)
    return Counter(json.loads(entry.split(b" ", 1)[1])["job_id"] for entry in entries)


def unsettled(rclient: redis.Redis, settings: Settings) -> int:
    return int(rclient.zcard(Keys(settings.redis_prefix).endings))


def test_a_cascade_larger_than_a_call_ends_every_waiter_once_in_bounded_pieces(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    root = submit(api, command="root")["job_id"]
    first = [after(api, root) for _ in range(WIDE)]
    # Each waits for 20 of the layer before: most visits find a job ended already.
    second = [after(api, *(first[(i + j) % WIDE] for j in range(20))) for i in range(WIDE)]
    assert_json(api.delete(f"/jobs/{root}"))
    ended_at_once = statuses(api, first + second)["failed"]
    assert 0 < ended_at_once < 2 * WIDE  # the request's own piece, the rest left
    assert unsettled(rclient, settings) > 0
    assert settle_all(store) > 1
    for waiter in first + second:
        ended = job(api, waiter)
        assert (ended["status"], ended["failure_reason"]) == ("failed", "dependency_failed")
        assert ended["stderr"].startswith("dependency job-")
    assert set(events(rclient, settings).values()) == {1}  # one event per job, every job
    assert len(events(rclient, settings)) == 1 + 2 * WIDE
    keys = Keys(settings.redis_prefix)
    assert rclient.hlen(keys.waiting) == 0
    assert not list(rclient.scan_iter(keys.endings + "*"))


def test_settling_goes_on_piece_after_piece_until_none_is_left(
    api: TestClient, store: SyncJobStore, settings: Settings
) -> None:
    root = submit(api, command="root")["job_id"]
    chain = [root]
    for _ in range(300):
        chain.append(after(api, chain[-1]))
    assert_json(api.delete(f"/jobs/{root}"))
    assert job(api, chain[-1])["status"] == "waiting"
    settled = store.run(ops.upkeep.settle_endings())
    assert settled.left == 0 and settled.calls > 1
    assert statuses(api, chain) == {"failed": len(chain)}


def test_a_waiter_whose_dependency_failed_never_runs_when_the_others_are_done_meanwhile(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    x, y = submit(api, command="x")["job_id"], submit(api, command="y")["job_id"]
    waiters = [after(api, x, y) for _ in range(WIDE)]
    assert_json(api.delete(f"/jobs/{x}"))
    assert statuses(api, waiters)["waiting"] > 0
    run(api, y)  # each waiter left: one fewer to wait for, never none
    assert statuses(api, waiters)["pending"] == 0
    settle_all(store)
    for waiter in waiters:
        ended = job(api, waiter)
        assert (ended["status"], ended["failure_reason"]) == ("failed", "dependency_failed")
        assert ended["stderr"] == f"dependency {x} ended cancelled"
    assert all(events(rclient, settings)[w] == 1 for w in waiters)


def test_a_dependency_retried_and_ended_again_meanwhile_keeps_its_endings_apart(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    x = submit(api, command="x")["job_id"]
    earlier = [after(api, x) for _ in range(WIDE)]
    assert_json(api.delete(f"/jobs/{x}"))
    assert statuses(api, earlier)["waiting"] > 0
    assert assert_json(api.post(f"/jobs/{x}/retry"))["status"] == "pending"
    later = after(api, x)  # waits for x's new attempt
    run(api, x)
    assert job(api, later)["status"] == "pending"  # x's done sees only its own waiter
    settle_all(store)
    assert statuses(api, earlier) == {"failed": WIDE}  # the cancel's, each once
    assert job(api, later)["status"] == "pending"
    counted = events(rclient, settings)
    assert counted[x] == 2 and all(counted[w] == 1 for w in earlier) and later not in counted
    # A new job after a failed one whose waiters are not all settled fails at once.
    y = submit(api, command="y")["job_id"]
    more = [after(api, y) for _ in range(WIDE)]
    run(api, y, "failed", 1)
    assert unsettled(rclient, settings) > 0
    late = assert_json(api.post("/jobs", json={"command": "z", "after": [y]}), 201)
    assert (late["status"], late["failure_reason"]) == ("failed", "dependency_failed")
    settle_all(store)
    assert statuses(api, more) == {"failed": WIDE}


def test_a_waiter_retried_by_hand_is_out_of_the_endings_of_its_earlier_wait(
    api: TestClient, store: SyncJobStore, settings: Settings
) -> None:
    x, y = submit(api, command="x")["job_id"], submit(api, command="y")["job_id"]
    waiters = [after(api, x, y) for _ in range(WIDE)]
    assert_json(api.delete(f"/jobs/{x}"))
    w = next(w for w in waiters if job(api, w)["status"] == "waiting")  # in x's ending, left
    assert_json(api.delete(f"/jobs/{w}"))  # cancelled: failed, so it may be retried
    answer = assert_json(api.post("/jobs/retry", json={"job_ids": [x, w]}))
    assert answer["retried"] == [x, w]
    assert job(api, w)["status"] == "waiting"  # for x's new attempt and y
    settle_all(store)  # x's cancel fails the others, not w: it waits for x's new attempt
    assert job(api, w)["status"] == "waiting"
    assert statuses(api, [v for v in waiters if v != w]) == {"failed": WIDE - 1}
    run(api, x)
    run(api, y)
    assert job(api, w)["status"] == "pending"


def test_a_restore_settles_what_the_lost_endings_left(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    """Redis lost its data with an ending not all settled: the restore's rebuild fails every
    waiter whose dependency failed (from the statuses), none stranded."""
    x = submit(api, command="x")["job_id"]
    waiters = [after(api, x) for _ in range(WIDE)]
    assert_json(api.delete(f"/jobs/{x}"))
    assert statuses(api, waiters)["waiting"] > 0
    assert snapshot_once(settings) >= 1
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    settle_all(store)
    assert statuses(api, waiters) == {"failed": WIDE}


def test_a_restore_over_endings_left_drops_them_and_counts_from_the_file(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    """A restore over a Redis with endings not all settled: the file's jobs come back as it
    holds them (waiting for x, pending again), and the endings left from before, which the
    file never saw, fail none of them."""
    x = submit(api, command="x")["job_id"]
    waiters = [after(api, x) for _ in range(WIDE)]
    assert snapshot_once(settings) >= 1
    assert_json(api.delete(f"/jobs/{x}"))
    assert unsettled(rclient, settings) > 0
    restore_from_file(settings, settings.scheduler_db, force=True)
    assert unsettled(rclient, settings) == 0
    settle_all(store)
    assert job(api, x)["status"] == "pending"
    assert statuses(api, waiters) == {"waiting": WIDE}
    run(api, x)
    settle_all(store)
    assert statuses(api, waiters) == {"pending": WIDE}


# Retries within bounds.


def test_a_retry_never_makes_more_wait_for_a_job_than_max_waiters(
    api: TestClient, rclient: redis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(create_scripts, "MAX_WAITERS", 2)
    monkeypatch.setattr(retry_scripts, "MAX_WAITERS", 2)
    dep = submit(api, command="dep")["job_id"]
    earlier = [after(api, dep), after(api, dep)]
    assert_json(api.delete(f"/jobs/{dep}"))  # fails both
    assert_json(api.post(f"/jobs/{dep}/retry"))
    later = [after(api, dep), after(api, dep)]  # two wait for it again: its limit
    refused = api.post(f"/jobs/{earlier[0]}/retry")
    assert_text_error(refused, 409, "a job it runs after is waited for by too many jobs already")
    answer = assert_json(api.post("/jobs/retry", json={"job_ids": earlier}))
    assert (answer["retried"], answer["too_many_waiters"]) == ([], earlier)
    waiters = Keys(settings.redis_prefix).dependents(dep)
    assert rclient.smembers(waiters) == {w.encode() for w in later}
    assert [job(api, w)["status"] for w in earlier] == ["failed", "failed"]


def test_a_retried_waiter_still_counted_among_them_is_no_new_one(
    api: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled waiter stays in its dependency's set: its retry adds nobody."""
    monkeypatch.setattr(create_scripts, "MAX_WAITERS", 2)
    monkeypatch.setattr(retry_scripts, "MAX_WAITERS", 2)
    dep = submit(api, command="dep")["job_id"]
    waiters = [after(api, dep), after(api, dep)]
    assert_json(api.delete(f"/jobs/{waiters[0]}"))
    assert assert_json(api.post(f"/jobs/{waiters[0]}/retry"))["status"] == "waiting"


def test_a_bulk_retry_of_jobs_waiting_for_many_is_split_into_bounded_calls(
    api: TestClient, store: SyncJobStore, settings: Settings
) -> None:
    deps = [submit(api, command=f"dep {i}")["job_id"] for i in range(100)]
    waiters = [after(api, *deps) for _ in range(30)]
    for waiter in waiters:
        assert_json(api.delete(f"/jobs/{waiter}"))
    # One call takes the first few only (each costs its 100 dependencies: endings.py).
    call = retry_scripts.retry_jobs(waiters, Placement("live"), time.time(), 3600)
    first = store.run(call)
    assert 1 <= len(first) < len(waiters)
    assert [r.job_id for r in first] == waiters[: len(first)]
    # The API sends the rest again: its answer holds them all, in order.
    answer = assert_json(api.post("/jobs/retry", json={"job_ids": waiters}))
    assert answer["retried"] == waiters[len(first) :]
    assert answer["not_failed"] == waiters[: len(first)]
    assert {job(api, w)["status"] for w in waiters} == {"waiting"}

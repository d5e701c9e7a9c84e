"""Each attempt of a job is kept where it ends (attempts.lua record_attempt, called
by `finish` and `requeue` only), apart from the record: every walk of test_endings.py leaves
one entry per attempt, the last one the job's ending, and a record byte-identical to what
the original's clients read (the Go order of test_lua.py, no field added). The list is
bounded (ATTEMPTS_KEPT entries, ATTEMPT_TAIL_BYTES of each output) and leaves with the job."""

from __future__ import annotations

import json
import time

import pytest
import redis

from scheduler.config import Settings
from scheduler.models.attempt import ATTEMPT_TAIL_BYTES, ATTEMPTS_KEPT, Attempt, attempts_decoder
from scheduler.models.job import JOB_FIELDS, job_decoder, record_encoder
from scheduler.store import ops
from scheduler.store.errors import JobNotFound
from scheduler.store.keys import Keys
from scheduler.store.scripts import listing
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory
from tests.store.test_endings import (
    ENDINGS,
    LOST,
    TIMEOUT,
    WALK_FIELDS,
    Run,
    Step,
    claim,
    done,
    fail,
    lose_node,
    time_out,
)
from tests.store.test_lua import GO_ORDER, OURS, assert_go_bytes, stored

# Each walk of test_endings.ENDINGS: its attempts, (reason, exit code, whether it ran) each.
ATTEMPTS: dict[str, list[tuple[str, int | None, bool]]] = {
    "done": [("done", 0, True)],
    "retried, then done": [("failed", 3, True), ("done", 0, True)],
    "failed after its retry": [("failed", 3, True), ("failed", 3, True)],
    "timed out": [("timed_out", -1, True)],
    "retried, then timed out": [("failed", 3, True), ("timed_out", -1, True)],
    "cancelled while pending": [("cancelled", None, False)],
    "cancelled while running, the agent confirms": [("cancelled", None, True)],
    "cancelled while running, past the grace": [("cancelled", None, True)],
    "its node lost, retried, then done": [("node_lost", None, True), ("done", 0, True)],
    "its node lost twice": [("node_lost", None, True), ("node_lost", -1, True)],
    "failed, then its node lost": [("failed", 3, True), ("node_lost", -1, True)],
    "retried, then cancelled": [("failed", 3, True), ("cancelled", None, False)],
    "its dependency timed out": [("dependency_failed", None, False)],
}
# Walks with a retry policy of the job's own (a timeout is retried only under one).
OWN_POLICY: dict[str, tuple[list[Step], list[tuple[str, int | None, bool]]]] = {
    "timed out, retried, then done": (
        [claim, time_out, claim, done],
        [("timed_out", -1, True), ("done", 0, True)],
    ),
}


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(
        max_job_retries=1,
        job_timeout_secs=TIMEOUT,
        cancel_grace_secs=30,
        node_ttl_secs=30,
        node_lost_secs=LOST,
        job_retention_secs=60,
    )


def attempts(store: SyncJobStore, job_id: str) -> list[Attempt]:
    return attempts_decoder.decode(b"[" + b",".join(store.run(listing.attempts(job_id))) + b"]")


def test_every_walk_has_its_attempts() -> None:
    assert set(ATTEMPTS) == set(ENDINGS)


def walk(run: Run, steps: list[Step]) -> list[tuple[str, int | None, bool]]:
    seen = []
    for step in steps:
        step(run)
        seen = [
            (a.reason, a.exit_code, a.started_at != "") for a in attempts(run.store, run.job_id)
        ]
    return seen


@pytest.mark.parametrize("name", [*ATTEMPTS, *OWN_POLICY])
def test_each_attempt_is_kept_as_it_ends_and_the_record_is_unchanged(
    name: str,
    make_client: ClientFactory,
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
) -> None:
    if name in OWN_POLICY:
        steps, expected = OWN_POLICY[name]
        run = Run(make_client(settings), store, rclient, max_retries=1)
    else:
        steps, expected = ENDINGS[name][0], ATTEMPTS[name]
        api = make_client(settings)
        run = Run(api, store, rclient, **WALK_FIELDS.get(name, lambda api: {})(api))
    assert attempts(store, run.job_id) == []

    assert walk(run, steps) == expected

    raw = stored(rclient, settings, run.job_id)
    assert run.api.get(f"/jobs/{run.job_id}").content == raw + b"\n"
    # The record as the original's clients read it: nothing of the attempts in it.
    assert raw == record_encoder.encode(job_decoder.decode(raw))
    job = json.loads(raw)
    assert set(job) <= {field.name for field in JOB_FIELDS}
    if name not in OWN_POLICY:  # (max_retries, of the job's own policy, is not in OURS)
        assert_go_bytes(raw)
        assert set(job) <= set(GO_ORDER + OURS)
    kept = attempts(store, run.job_id)
    assert [a.attempt for a in kept] == list(range(1, len(expected) + 1))
    last = kept[-1]
    assert last.reason in (job.get("failure_reason") or job["status"], "done")
    assert last.ended_at == job["finished_at"] and last.exit_code == job.get("exit_code")
    # The record's stderr, unless it is an earlier attempt's that the last report (done,
    # failed: the walks' reports send no stderr) did not replace
    # (test_an_attempt_keeps_its_output_and_times); a timeout's, a loss's is the last's own.
    carried = len(kept) > 1 and last.reason in ("done", "failed")
    assert last.stderr == ("" if carried else job.get("stderr", ""))
    for attempt in kept:
        assert attempt.node_id in ("a", "b")
        assert attempt.started_at == "" or attempt.started_at <= attempt.ended_at


def test_an_attempt_keeps_its_output_and_times(
    make_client: ClientFactory, settings: Settings, store: SyncJobStore, rclient: redis.Redis
) -> None:
    run = Run(make_client(settings), store, rclient)
    claim(run)
    started = run.job()["running_at"]
    run.report("failed", exit_code=3, stdout="out 1", stderr="err 1")
    claim(run)
    run.report("done", exit_code=0, stdout="out 2")
    first, second = attempts(store, run.job_id)
    assert (first.attempt, first.node_id, first.started_at) == (1, "a", started)
    assert (first.exit_code, first.stdout, first.stderr, first.reason) == (
        3,
        "out 1",
        "err 1",
        "failed",
    )
    assert (second.attempt, second.exit_code, second.stdout) == (2, 0, "out 2")
    assert second.ended_at == run.job()["finished_at"]
    # Its report sent no stderr: the record keeps the first's (the original's rule), the
    # second attempt's entry has none of it (it said "err 1" as if it were its own).
    assert (run.job()["stderr"], second.stderr) == ("err 1", "")


def test_output_tails_are_bounded_on_a_character(
    make_client: ClientFactory, settings: Settings, store: SyncJobStore, rclient: redis.Redis
) -> None:
    run = Run(make_client(settings), store, rclient)
    claim(run)
    stdout = "start " + "é" * 3000 + " end/"  # 2-byte characters: a byte cut may split one
    stderr = "x" * 10_000
    run.report("done", exit_code=0, stdout=stdout, stderr=stderr)
    (kept,) = attempts(store, run.job_id)
    assert len(kept.stdout.encode()) <= ATTEMPT_TAIL_BYTES and stdout.endswith(kept.stdout)
    assert len(kept.stdout.encode()) >= ATTEMPT_TAIL_BYTES - 1
    assert kept.stderr == stderr[-ATTEMPT_TAIL_BYTES:]
    assert run.job()["stdout"] == stdout  # the record keeps the whole output, as before


def test_the_list_keeps_the_last_attempts(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings(max_job_retries=0)
    store = SyncJobStore.connect(settings)
    try:
        run = Run(make_client(settings), store, rclient, max_retries=ATTEMPTS_KEPT + 5)
        for _ in range(ATTEMPTS_KEPT + 3):
            claim(run)
            fail(run)
        kept = attempts(store, run.job_id)
        assert len(kept) == ATTEMPTS_KEPT
        assert [a.attempt for a in kept] == list(range(4, ATTEMPTS_KEPT + 4))
    finally:
        store.close()


def test_a_pruned_job_takes_its_attempts(
    make_client: ClientFactory, settings: Settings, store: SyncJobStore, rclient: redis.Redis
) -> None:
    run = Run(make_client(settings), store, rclient)
    for step in (claim, fail, claim, done):
        step(run)
    keys = Keys(settings.redis_prefix)
    assert rclient.llen(keys.attempts(run.job_id)) == 2
    rclient.delete(keys.dirty)  # as a snapshot that has written it
    assert run.job_id in store.run(ops.upkeep.prune_finished(time.time() + 61))
    assert not rclient.exists(keys.attempts(run.job_id))
    with pytest.raises(JobNotFound):
        store.run(listing.attempts(run.job_id))


def test_a_service_placed_again_keeps_its_attempt(
    make_client: ClientFactory, settings: Settings, store: SyncJobStore, rclient: redis.Redis
) -> None:
    """A service whose node is lost is placed again without using a retry: its attempt is
    kept (node_lost), and its number repeats (retry_count is unchanged)."""
    run = Run(make_client(settings), store, rclient, job_type="service", port=8080)
    claim(run)
    lose_node(run)
    (kept,) = attempts(store, run.job_id)
    assert (kept.attempt, kept.reason, kept.node_id) == (1, "node_lost", "a")


def test_a_service_placed_again_ended_by_a_report_without_stderr_has_none_of_the_loss(
    make_client: ClientFactory, settings: Settings, store: SyncJobStore, rclient: redis.Redis
) -> None:
    """The loss's stderr ("node lost") stays in the record of a service placed again, whose
    retry_count is unchanged: the attempt its next report ends (the service stopped, no
    stderr sent) is not the lost one, and says none of it."""
    run = Run(make_client(settings), store, rclient, job_type="service", port=8080)
    claim(run)
    lose_node(run)
    claim(run)
    run.report("done", exit_code=0)
    lost, ended = attempts(store, run.job_id)
    assert (lost.reason, lost.stderr) == ("node_lost", "node lost")
    assert (ended.reason, run.job()["stderr"], ended.stderr) == ("done", "node lost", "")
    assert b"_carried" not in rclient.get(store.keys.job(run.job_id))


def test_a_retried_job_cancelled_before_it_ran_again_has_none_of_the_failure(
    make_client: ClientFactory, settings: Settings, store: SyncJobStore, rclient: redis.Redis
) -> None:
    """A failure's stderr stays in the record of the job retried (the original's rule); an
    attempt cancelled while pending never ran, so its entry has none of it."""
    run = Run(make_client(settings), store, rclient)
    claim(run)
    run.report("failed", exit_code=3, stderr="err 1")
    assert run.api.delete(f"/jobs/{run.job_id}").status_code == 200
    failed, cancelled = attempts(store, run.job_id)
    assert (failed.reason, failed.stderr) == ("failed", "err 1")
    assert (cancelled.reason, cancelled.started_at, cancelled.stderr) == ("cancelled", "", "")
    assert b"_carried" not in rclient.get(store.keys.job(run.job_id))

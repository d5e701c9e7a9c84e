"""The dashboard's per-minute series (issue 28): the pure arithmetic (bucketing, percentiles
from buckets, columns, the charts' scaling) as tables, and against a real Redis a known
sequence of jobs, each step at a chosen `now`, giving the expected counts per minute, wait
buckets, gauges and expiry."""

from __future__ import annotations

import math

import pytest
import redis

from scheduler.api.ui_charts import HEIGHT, nice_top, runs, ticks, x_of, y_of
from scheduler.config import Settings
from scheduler.models.job import JobUpdate
from scheduler.models.series import BUCKETS, column, columns, filled, minute_of, percentile
from scheduler.models.wire import parse_rfc3339, rfc3339
from scheduler.nodes.placement import Placement
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import jobs
from scheduler.store.scripts.library import LIBRARY
from scheduler.store.scripts.retry import RetryPolicy, retry_jobs
from scheduler.store.scripts.series import read_series
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import SettingsFactory

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a minute's start (minute 29 453 760)


@pytest.mark.parametrize(
    ("epoch", "minute"),
    [(T0, 29_453_760), (T0 + 59.999, 29_453_760), (T0 + 60, 29_453_761), (T0 - 0.001, 29_453_759)],
)
def test_a_time_falls_in_its_minute(epoch: float, minute: int) -> None:
    assert minute_of(epoch) == minute


def waits(**at: int) -> list[int]:
    """Bucket counts: waits(b0=3, b5=1) -> [3, 0, 0, 0, 0, 1, 0, ...]."""
    return [at.get(f"b{i}", 0) for i in range(BUCKETS)]


@pytest.mark.parametrize(
    ("buckets", "q", "expected"),
    [
        (waits(), 0.5, None),  # no waits: no percentile
        (waits(b0=1), 0.5, 0.1),
        (waits(b0=1), 0.95, 0.1),
        (waits(b0=50, b5=50), 0.5, 0.1),  # rank 50 is the 50th: still the first bucket
        (waits(b0=50, b5=50), 0.51, 5),
        (waits(b0=95, b9=5), 0.95, 0.1),
        (waits(b0=94, b9=6), 0.95, 300),
        (waits(b11=1), 0.5, math.inf),  # past the last bound
        (waits(b3=1, b11=1), 0.5, 1),
    ],
)
def test_percentiles_come_from_the_bucket_counts(
    buckets: list[int], q: float, expected: float | None
) -> None:
    assert percentile(buckets, q) == expected


def test_columns_sum_counts_keep_the_last_gauges_and_add_the_buckets() -> None:
    rows = [
        {"submitted": 2, "wait:0": 1, "started:other": 1, "waiting": 4},
        {},
        {"done": 1, "failed": 1, "wait:0": 2, "running": 3},
        {"submitted": 1, "waiting": 1},
    ]
    whole = column(100, rows)
    assert whole.counts == {"submitted": 3, "started": 4, "done": 1, "failed": 1}
    assert whole.gauges == {"waiting": 1, "running": 3}
    assert whole.waits[0] == 3 and sum(whole.waits) == 3
    pairs = columns(100, rows, 3)
    assert [(c.first, c.minutes) for c in pairs] == [(100, 3), (103, 1)]
    assert pairs[0].counts["submitted"] == 2 and pairs[0].gauges == {"waiting": 4, "running": 3}
    assert pairs[1].gauges == {"waiting": 1, "running": None}


@pytest.mark.parametrize(
    ("gauges", "now", "expected"),
    [
        ([], 5, []),
        ([None, None], 5, [None, 5]),  # not known before the first sample
        ([3, None, None, 1], 7, [3, 3, 3, 7]),  # a minute without a change carries the last
        ([None, 2, None], 0, [None, 2, 0]),  # the last column is the live value
    ],
)
def test_a_gauge_carries_its_last_value(
    gauges: list[int | None], now: int, expected: list[int]
) -> None:
    assert filled(gauges, now) == expected


@pytest.mark.parametrize(
    ("highest", "top"),
    [(0, 1), (1, 1), (1.5, 2), (3, 5), (7, 10), (10, 10), (11, 20), (250, 500), (501, 1000)],
)
def test_a_chart_tops_at_a_round_number(highest: float, top: float) -> None:
    assert nice_top(highest) == top


@pytest.mark.parametrize(
    ("value", "top", "y"),
    [(0, 10, HEIGHT), (10, 10, 0), (5, 10, HEIGHT / 2), (20, 10, 0), (-1, 10, HEIGHT)],
)
def test_values_scale_to_the_drawing_and_stay_inside_it(value: float, top: float, y: float) -> None:
    assert y_of(value, top) == y


def test_a_line_breaks_where_a_column_has_no_value() -> None:
    assert x_of(0, 4) == 75 and x_of(3, 4) == 525
    # A value alone is a level stroke across its column.
    assert runs([1, None, 2, 2], 2) == [
        f"0.0,{HEIGHT / 2} 150.0,{HEIGHT / 2}",
        "375.0,0.0 525.0,0.0",
    ]
    assert runs([None, None], 1) == []


# Against a real Redis, each step at its own `now`.

RECORD = '{{"command":"echo","status":"{status}","retry_count":0,"created_at":"{at}"{more}}}'


@pytest.fixture
def keys(settings: Settings, rclient: redis.Redis) -> Keys:
    keys = Keys(settings.redis_prefix)
    rclient.set(keys.initialised, "1")
    return keys


def create(store: SyncJobStore, now: float, run_at: float | None = None) -> str:
    status, more = ("delayed", f',"run_at":"{rfc3339(run_at)}"') if run_at else ("pending", "")
    record = RECORD.format(status=status, at=rfc3339(now), more=more).encode()
    call = jobs.create_job(record, Placement.fixed("n1"), now, 30, due=run_at)
    created = store.run(call)
    job_id: str = str(created.job, "utf-8").split('"job_id":"')[1].split('"')[0]
    return job_id


def move(store: SyncJobStore, settings: Settings, job_id: str, status: str, now: float) -> None:
    update = JobUpdate(status=status)
    policy, ttl = RetryPolicy.of(settings), settings.node_ttl_secs
    store.run(jobs.transition(job_id, update, now, policy, "open", node_ttl=ttl))


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_job_retries=0)


def test_a_known_sequence_of_jobs_gives_its_minutes(
    store: SyncJobStore, settings: Settings, keys: Keys, rclient: redis.Redis
) -> None:
    m = minute_of(T0)
    a = create(store, T0 + 1)
    b = create(store, T0 + 2)
    c = create(store, T0 + 3)
    move(store, settings, a, "running", T0 + 1.05)  # waited 50 ms: bucket 0 (<= 0.1 s)
    move(store, settings, b, "running", T0 + 5)  # 3 s: bucket 5 (<= 5 s)
    move(store, settings, a, "done", T0 + 30)
    move(store, settings, b, "failed", T0 + 61)  # the next minute
    move(store, settings, c, "running", T0 + 63)  # 60 s: bucket 8 (<= 60 s)
    d = create(store, T0 + 64, run_at=T0 + 100)  # delayed: its wait runs from run_at
    store.run(ops.upkeep.promote_due(T0 + 100))
    move(store, settings, d, "running", T0 + 100.2)  # 0.2 s after run_at: bucket 1
    first, second = store.run(read_series(m, 2))
    assert first == {"submitted": 3, "wait:0": 1, "wait:5": 1, "done": 1}
    assert {k: v for k, v in second.items() if k not in ("waiting", "running")} == {
        "submitted": 1, "failed": 1, "wait:8": 1, "wait:1": 1
    }  # fmt: skip
    # The promotion at T0 + 100 sampled the gauges: d pending (due), c running.
    assert (second["waiting"], second["running"]) == (1, 1)
    col = column(m, [first, second])
    assert col.counts == {"submitted": 4, "started": 4, "done": 1, "failed": 1}
    assert (col.percentile(0.5), col.percentile(0.95)) == (0.25, 60)
    assert store.run(read_series(m - 1, 1)) == [{}]  # a minute nothing happened in
    # Each minute expires: without SERIES_RETENTION_SECS written, after 2 days.
    assert 172_000 < rclient.ttl(keys.series(m)) <= 172_800


def test_a_minute_expires_after_the_retention_the_api_wrote(
    store: SyncJobStore, settings: Settings, keys: Keys, rclient: redis.Redis
) -> None:
    rclient.set(keys.series_retention, "3600")
    create(store, T0)
    assert 3500 < rclient.ttl(keys.series(minute_of(T0))) <= 3600


def test_a_retried_claim_counts_as_started_without_a_wait(
    store: SyncJobStore, make_settings: SettingsFactory, keys: Keys
) -> None:
    retrying = make_settings(max_job_retries=1)
    job = create(store, T0)
    move(store, retrying, job, "running", T0 + 0.5)
    move(store, retrying, job, "failed", T0 + 1)  # retried at once: pending again
    move(store, retrying, job, "running", T0 + 2)
    (minute,) = store.run(read_series(minute_of(T0), 1))
    assert minute == {"submitted": 1, "wait:2": 1, "started:other": 1}


def test_a_wait_counts_from_when_the_job_became_runnable(
    store: SyncJobStore, settings: Settings, keys: Keys
) -> None:
    """A job retried by hand, or released by its last dependency, waits from then, not from
    its first submit (issue 38): a retry 300 s later, claimed 0.2 s after it, is bucket 1."""
    job = create(store, T0)
    move(store, settings, job, "running", T0 + 0.05)  # bucket 0
    move(store, settings, job, "failed", T0 + 1)  # no retries left: failed
    (retried,) = store.run(retry_jobs([job], Placement.fixed("n1"), T0 + 300, 30))
    assert b'"status":"pending"' in retried.job, retried
    move(store, settings, job, "running", T0 + 300.2)
    dep = create(store, T0 + 301)
    record = RECORD.format(status="waiting", at=rfc3339(T0 + 301), more="").encode()
    waiter = store.run(jobs.create_job(record, Placement.fixed("n1"), T0 + 301, 30, after=[dep]))
    waiter_id = str(waiter.job, "utf-8").split('"job_id":"')[1].split('"')[0]
    move(store, settings, dep, "running", T0 + 301.05)  # bucket 0
    move(store, settings, dep, "done", T0 + 400)  # releases the waiter: runnable from here
    move(store, settings, waiter_id, "running", T0 + 400.2)  # 0.2 s: bucket 1, not 99 s
    counts: dict[str, int] = {}
    for minute in store.run(read_series(minute_of(T0), 8)):
        for name, value in minute.items():
            if name.startswith("wait:"):
                counts[name] = counts.get(name, 0) + value
    assert counts == {"wait:0": 2, "wait:1": 2}


@pytest.mark.parametrize(
    "stamp",
    [
        "1970-01-01T00:00:00.000000Z",
        "2026-01-01T00:00:00.000000Z",
        "2026-02-28T23:59:59.999999Z",
        "2028-02-29T12:34:56.789000Z",  # a leap day
        "2026-03-01T00:00:00.100000Z",
        "2099-12-31T23:59:59.050000Z",
    ],
)
def test_the_claims_reading_of_a_stamp_is_its_epoch_to_the_millisecond(
    rclient: redis.Redis, stamp: str
) -> None:
    lua = LIBRARY["epoch_of"] + "\nreturn tostring(epoch_of(ARGV[1]))"
    assert float(rclient.eval(lua, 0, stamp)) == pytest.approx(parse_rfc3339(stamp), abs=0.001)


@pytest.mark.parametrize("stamp", ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.000000+00:00", ""])
def test_a_stamp_not_ours_has_no_reading(rclient: redis.Redis, stamp: str) -> None:
    lua = LIBRARY["epoch_of"] + "\nreturn epoch_of(ARGV[1]) == nil and 1 or 0"
    assert rclient.eval(lua, 0, stamp) == 1


@pytest.mark.parametrize(
    ("top", "shown"),
    [
        (1.0, ("1", "0.5", "0")),
        (2.0, ("2", "1", "0")),
        (5000.0, ("5,000", "2,500", "0")),
        (1_000_000.0, ("1,000,000", "500,000", "0")),  # `:g` wrote 1e+06
        (5e7, ("50,000,000", "25,000,000", "0")),
    ],
)
def test_the_axis_reads_in_round_numbers_with_separators(
    top: float, shown: tuple[str, str, str]
) -> None:
    assert ticks(top) == shown

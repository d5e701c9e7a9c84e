"""The shards' names and routing (config/shards.py, store/shards.py) and the merges of the
sharded store (store/sharded.py): pure functions, held to tables."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest
from redis.crc import key_slot as redis_key_slot

from scheduler.config.shards import SLOTS, key_slot, shard_db, shard_prefixes
from scheduler.store.merging import merged, merged_search
from scheduler.store.scripts.listing import Found, Page
from scheduler.store.scripts.overview import Overview
from scheduler.store.scripts.overview import merged as merged_overview
from scheduler.store.scripts.series import merged as merged_series
from scheduler.store.shards import Layout, key_order, node_shard


@pytest.mark.parametrize("tag", ["sched", "eu.prod-1", "a", "sched-12", "x:y"])
def test_the_slot_is_redis_clusters(tag: str) -> None:
    assert key_slot(tag) == redis_key_slot(("{" + tag + "}:jobs").encode())


@pytest.mark.parametrize("prefix", ["sched", "eu.prod-1", "t0123456789ab"])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 6, 12, 64])
def test_each_shard_has_a_slot_of_its_own_in_its_share_of_the_slots(
    prefix: str, count: int
) -> None:
    prefixes = shard_prefixes(prefix, count)
    assert prefixes[0] == prefix  # shard 0 is the unsharded layout
    assert len(set(prefixes)) == count
    width = SLOTS // count
    first = key_slot(prefix) // width
    shares = [((key_slot(p) // width) - first) % count for p in prefixes[1:]]
    assert shares == list(range(1, count))  # shard k in the k-th run of slots after shard 0's


def test_three_shards_land_on_three_equal_primaries() -> None:
    # `redis-cli --cluster create` with 3 primaries: 0-5460, 5461-10922, 10923-16383.
    def owner(slot: int) -> int:
        return 0 if slot <= 5460 else 1 if slot <= 10922 else 2

    for prefix in ("sched", "prod", "t1", "eu.prod-1"):
        owners = {owner(key_slot(p)) for p in shard_prefixes(prefix, 3)}
        assert owners == {0, 1, 2}, prefix


@pytest.mark.parametrize(
    "path, shard, expected",
    [
        ("scheduler.db", 0, "scheduler.db"),
        ("scheduler.db", 2, "scheduler-2.db"),
        ("/var/lib/s/jobs.sqlite", 1, "/var/lib/s/jobs-1.sqlite"),
        ("/var/lib/s.d/jobs", 1, "/var/lib/s.d/jobs-1"),
        ("jobs", 3, "jobs-3"),
        (":memory:", 1, ":memory:"),
    ],
)
def test_each_shard_has_a_snapshot_file_of_its_own(path: str, shard: int, expected: str) -> None:
    assert shard_db(path, shard) == expected


@pytest.mark.parametrize(
    "layout, job_id, shard",
    [
        (Layout(1), "job-7", 0),
        (Layout(3), "job-3", 0),
        (Layout(3), "job-4", 1),
        (Layout(3), "job-5", 2),
        (Layout(3, floor=10), "job-10", 0),  # made before the upgrade
        (Layout(3, floor=10), "job-4", 0),
        (Layout(3, floor=10), "job-11", 2),
        (Layout(3, floor=10), "job-12", 0),
        (Layout(3, floor=10), "job-13", 1),
        (Layout(3), "legacy-row", 0),  # not job-N: an old snapshot's row, made unsharded
        (Layout(3), "job-007", 1),  # where job-7 is: no job has that id, a 404 there
    ],
)
def test_a_job_id_names_its_shard(layout: Layout, job_id: str, shard: int) -> None:
    assert layout.job_shard(job_id) == shard


def test_a_nodes_shard_is_stable_and_nodes_spread_evenly() -> None:
    assert node_shard("n1", 1) == 0
    assert node_shard("n1", 3) == node_shard("n1", 3)
    spread = Counter(node_shard(f"node-{i}", 3) for i in range(3000))
    assert all(abs(n - 1000) < 100 for n in spread.values()), spread
    # Rendezvous: going from 3 to 4 shards moves only the nodes the new shard ranks first.
    moved = sum(node_shard(f"node-{i}", 3) != node_shard(f"node-{i}", 4) for i in range(3000))
    assert moved == sum(node_shard(f"node-{i}", 4) == 3 for i in range(3000))


def test_an_idempotency_key_always_tries_the_shards_in_one_order() -> None:
    order = key_order("sqs:msg-1", 5)
    assert sorted(order) == [0, 1, 2, 3, 4]
    assert key_order("sqs:msg-1", 5) == order
    firsts = Counter(key_order(f"k{i}", 3)[0] for i in range(3000))
    assert all(abs(n - 1000) < 100 for n in firsts.values()), firsts


def head(number: int, size: int = 0) -> bytes:
    return msgspec.json.encode({"job_id": f"job-{number}", "pad": "x" * size})


def numbers(heads: list[bytes]) -> list[int]:
    return [int(msgspec.json.decode(h)["job_id"].removeprefix("job-")) for h in heads]


@pytest.mark.parametrize(
    "pages, limit, newest, expected",
    [
        ([[3, 6, 9], [4, 7], [5, 8]], 10, False, [3, 4, 5, 6, 7, 8, 9]),
        ([[3, 6], [4, 7], [5, 8]], 2, False, [3, 4]),
        ([[1, 4, 7], [2, 5], [3]], 3, False, [1, 2, 3]),
        ([[1, 4, 7], [2, 5, 8], [10]], 3, False, [1, 2, 4]),
        ([[9, 6, 3], [7, 4], [8, 5]], 3, True, [9, 8, 7]),
        ([[], [], []], 5, False, []),
        ([[12], [], [1, 2]], 5, False, [1, 2, 12]),
    ],
)
def test_the_shards_pages_merge_in_job_number_order(
    pages: list[list[int]], limit: int, newest: bool, expected: list[int]
) -> None:
    got = merged([Page([head(n) for n in page], cut=False) for page in pages], limit, newest)
    assert numbers(got) == expected


def test_a_page_stops_where_a_shard_that_left_jobs_out_stopped() -> None:
    # Shard 0 left jobs out after job-6 for its bytes: nothing past 6, or they would be skipped.
    pages = [Page([head(3), head(6)], cut=True), Page([head(4), head(7), head(8)], cut=False)]
    assert numbers(merged(pages, 10, False)) == [3, 4, 6]


def shard_page(
    jobs: list[int], sizes: dict[int, int], bound: int, limit: int, budget: int, newest: bool
) -> Page:
    """A shard's LIST, as its script (read.lua get_jobs) pages: after (newest: before)
    `bound`, `limit` jobs, leaving out the first that would take it past `budget` bytes and
    those after it (at least one job)."""
    if newest:
        ids = [n for n in sorted(jobs, reverse=True) if not bound or n < bound][:limit]
    else:
        ids = [n for n in sorted(jobs) if n > bound][:limit]
    page: list[bytes] = []
    size = 0
    for n in ids:
        size += len(head(n, sizes[n]))
        if size > budget and page:
            break
        page.append(head(n, sizes[n]))
    return Page(page, cut=len(page) < len(ids))


@pytest.mark.parametrize("newest", [False, True])
@pytest.mark.parametrize("limit, budget", [(1, 10**6), (3, 10**6), (7, 10**6), (50, 400), (5, 90)])
def test_paging_through_merged_pages_sees_every_job_once(
    newest: bool, limit: int, budget: int
) -> None:
    count = 3
    jobs = {k: [n for n in range(1, 120) if n % count == k and n % 7 != 3] for k in range(count)}
    sizes = {n: (n * 37) % 300 for n in range(1, 120)}
    seen: list[int] = []
    bound = 0
    for _ in range(500):
        pages = [shard_page(jobs[k], sizes, bound, limit, budget, newest) for k in range(count)]
        page = numbers(merged(pages, limit, newest))
        if not page:
            break
        assert len(page) <= limit
        seen += page
        bound = page[-1]
    every = sorted(n for k in jobs for n in jobs[k])
    assert seen == (every[::-1] if newest else every)


def test_a_merged_search_goes_on_from_where_no_shard_skips_a_job() -> None:
    found = [
        Found(jobs=[head(30), head(21)], looked=10, last=21, more=True),
        Found(jobs=[head(28), head(13)], looked=10, last=13, more=True),
        Found(jobs=[head(26)], looked=4, last=2, more=False),
    ]
    page = merged_search(found, 10)
    # Shard 0 stopped at 21, a job it found: shown (the next page goes on from before it),
    # the others' finds below it wait for that page.
    assert numbers(page.jobs) == [30, 28, 26, 21]
    assert (page.looked, page.last, page.more) == (24, 21, True)
    done = merged_search([Found([head(5)], 3, 1, False), Found([], 2, 2, False)], 10)
    assert (numbers(done.jobs), done.last, done.more) == ([5], 1, False)
    # An old snapshot's row that is not job-N (numbered 0) is shown once no shard stopped.
    legacy = msgspec.json.encode({"job_id": "not-a-job"})
    rows = merged_search([Found([head(3), legacy], 2, 0, False), Found([], 1, 1, False)], 10)
    assert rows.jobs == [head(3), legacy]


def test_the_overviews_and_series_of_shards_add_up() -> None:
    a = Overview({"n1": 1.0}, {"n1": (1, 2)}, {"done": 3}, {"lost": 1}, 2, {})
    b = Overview(
        {"n2": 2.0},
        {"n2": (0, 1)},
        {"done": 4, "failed": 1},
        {},
        1,
        {"n2": "operator"},
    )
    whole = merged_overview([a, b])
    assert whole.last_seen == {"n1": 1.0, "n2": 2.0}
    assert whole.queues == {"n1": (1, 2), "n2": (0, 1)}
    assert whole.by_status == {"done": 7, "failed": 1} and whole.stats == {"lost": 1}
    assert whole.outbox == 3 and whole.drained == {"n2": "operator"}
    minutes = merged_series([[{"submitted": 2}, {}], [{"submitted": 1, "done": 1}, {"done": 5}]])
    assert minutes == [{"submitted": 3, "done": 1}, {"done": 5}]

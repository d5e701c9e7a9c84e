"""A job's place in Redis, declared once (store/scripts/places.py PLACES): the Lua generated
from the table puts a job in exactly the table's indexes, scored as it says, moves it between
any two places touching only what differs, and takes it out again; and no other Lua enters a
job into one of them."""

from __future__ import annotations

import re

import pytest
import redis

from scheduler.store.keys import Keys
from scheduler.store.scripts import SCRIPTS
from scheduler.store.scripts.library import LIBRARY, assemble, parse, split
from scheduler.store.scripts.place_lua import PLACES_LUA
from scheduler.store.scripts.places import ROWS, Score, indexes, row_of
from tests.places import expected, key_of, place_of

N = 7
PRIORITY = 3
QUEUED = N - PRIORITY * 2**42
CPUS = 2
PLACES = [(status, placed) for status in ROWS for placed in (True, False)]

# A job of the test as the generated functions read it, from the script's arguments.
_JOB = """
local job = {status = status, node_id = node, priority = PRIORITY, cpus = CPUS,
  job_type = job_type, schedule = schedule ~= "" and schedule or nil}
"""
_ARGV = ("id", "n", "status", "node", "job_type", "schedule", "at")
_INCLUDES = "".join(
    f'--- @include "{name}"\n'
    for name in ("keys", "enter_place", "leave_fixed", "leave_place", "move_place", "queue_of")
)
# A waiting job's count is its own code's (endings.py wait_for), written before it enters.
_WAITS = 'if {status} == "waiting" then redis.call("HSET", K.waiting, id, 1) end\n'


def run(rclient: redis.Redis, keys: Keys, body: str, *args: object) -> object:
    lua = _INCLUDES + _JOB.replace("PRIORITY", str(PRIORITY)).replace("CPUS", str(CPUS)) + body
    text = assemble("PLACES_TEST", _ARGV, "rest", parse(lua))
    return rclient.eval(text, 1, keys.root, *args)


def enter(rclient: redis.Redis, keys: Keys, status: str, node: str, at: float, **job: str) -> None:
    args = ("job-7", N, status, node, job.get("job_type", ""), job.get("schedule", ""), at)
    body = _WAITS.format(status="status") + "enter_place(id, tonumber(n), job, at, redis.call)"
    run(rclient, keys, body, *args)


def score_of(index_score: Score, at: float) -> float | None:
    return {Score.NUMBER: N, Score.QUEUE: QUEUED, Score.AT: at}.get(index_score)


def assert_scores(
    rclient: redis.Redis, keys: Keys, status: str, node: str, at: float, kept: set[str]
) -> None:
    """Each sorted set of the place scores the job as the table says; an entry by time in
    `kept` keeps the time it entered with (`at` - 1 in these tests)."""
    for index in indexes(status, node != ""):
        key = key_of(keys, index, status, node, "")
        want = score_of(index.score, at - 1 if key in kept else at)
        if want is not None and rclient.type(key) == b"zset":
            assert rclient.zscore(key, "job-7") == want, key


def held_cpus(rclient: redis.Redis, keys: Keys, node: str) -> int:
    return int(rclient.hget(keys.node_room(node), "held_cpus") or 0)


@pytest.mark.parametrize(("status", "placed"), PLACES)
@pytest.mark.parametrize("job_type", ["", "service"])
def test_a_job_enters_exactly_the_indexes_of_its_place(
    rclient: redis.Redis, prefix: str, status: str, placed: bool, job_type: str
) -> None:
    keys, node = Keys(prefix), "n1" if placed else ""
    enter(rclient, keys, status, node, 50.0, job_type=job_type, schedule="nightly")
    want = expected(keys, status, node, service=job_type == "service", schedule="nightly")
    assert place_of(rclient, keys, "job-7") == want
    assert_scores(rclient, keys, status, node, 50.0, set())
    holds = row_of(status).holds and placed
    assert held_cpus(rclient, keys, "n1") == (CPUS if holds else 0)


@pytest.mark.parametrize(("status", "placed"), PLACES)
def test_a_job_leaves_every_index_of_its_place(
    rclient: redis.Redis, prefix: str, status: str, placed: bool
) -> None:
    keys, node = Keys(prefix), "n1" if placed else ""
    enter(rclient, keys, status, node, 50.0, schedule="nightly")
    args = ("job-7", N, status, node, "", "nightly", 0)
    run(rclient, keys, "leave_place(id, job)", *args)
    assert place_of(rclient, keys, "job-7") == set()
    assert held_cpus(rclient, keys, "n1") == 0


@pytest.mark.parametrize(("status", "placed"), PLACES)
def test_the_fixed_indexes_are_left_whatever_the_place_says(
    rclient: redis.Redis, prefix: str, status: str, placed: bool
) -> None:
    """leave_fixed (the restore's sweep of a record it replaces): every index whose key
    names nothing of the place, whatever status the job claims."""
    keys, node = Keys(prefix), "n1" if placed else ""
    enter(rclient, keys, status, node, 50.0)
    run(rclient, keys, "leave_fixed(id)", "job-7", N, "", "", "", "", 0)
    keyed = {
        key_of(keys, index, status, node, "") for index in indexes(status, placed) if index.args
    }
    assert place_of(rclient, keys, "job-7") == (expected(keys, status, node) & keyed) | (
        {keys.node_held(node)} if row_of(status).holds and placed else set()
    )


MOVES = [
    (old, was, new, to)
    for old, was_placed in PLACES
    for new, now_placed in PLACES
    for was, to in (
        [("n1", "n1"), ("n1", "n2")]
        if was_placed and now_placed
        else [("n1" if was_placed else "", "n2" if now_placed else "")]
    )
]


@pytest.mark.parametrize(("old", "was", "new", "to"), MOVES)
def test_a_move_leaves_the_job_in_exactly_the_new_place(
    rclient: redis.Redis, prefix: str, old: str, was: str, new: str, to: str
) -> None:
    keys = Keys(prefix)
    enter(rclient, keys, old, was, 49.0, schedule="nightly")
    before = place_of(rclient, keys, "job-7")
    args = ("job-7", N, old, was, "", "nightly", 50.0)
    body = _WAITS.format(status="rest[1]") + (
        "move_place(id, tonumber(n), job, rest[1], rest[2], at)\nreturn {job.status, job.node_id}"
    )
    moved = run(rclient, keys, body, *args, new, to)
    assert moved == [new.encode(), to.encode()]
    assert place_of(rclient, keys, "job-7") == expected(keys, new, to, schedule="nightly")
    assert_scores(rclient, keys, new, to, 50.0, kept=before)
    for node in ("n1", "n2"):
        holds = row_of(new).holds and node == to
        assert held_cpus(rclient, keys, node) == (CPUS if holds else 0), node


# What enters a job into an index of the table: a ZADD or SADD of one of its keys.
_ENTRIES = {index.key for row in ROWS.values() for index in (*row.on_node, *row.on_none)}
_ENTERING = re.compile(r'"(?:ZADD|SADD)",\s*K\.(' + "|".join(sorted(_ENTRIES)) + r")\b")


@pytest.mark.parametrize(("status", "placed"), PLACES)
@pytest.mark.parametrize("reason", ["", "quota", "no_fit"])
def test_the_queue_a_job_waits_in_is_its_places_index_scored_as_one(
    rclient: redis.Redis, prefix: str, status: str, placed: bool, reason: str
) -> None:
    """queue_of (GET /jobs/{id}/place's): the index of the job's place the table scores as
    a queue, the one its ZRANK is read in; none for a place without one."""
    keys, node = Keys(prefix), "n1" if placed else ""
    queues = {
        key_of(keys, index, status, node, "")
        for index in indexes(status, placed)
        if index.score is Score.QUEUE
    } & expected(keys, status, node, over_quota=reason == "quota")
    body = f'job.pending_reason = "{reason}"\nreturn queue_of(job) or false'
    found = run(rclient, keys, body, "job-7", N, status, node, "", "", 0)
    assert ({found.decode()} if found else set()) == queues
    assert len(queues) == (status == "pending")  # a pending job waits in one, always


def test_no_lua_but_the_generated_enters_a_job_in_its_place() -> None:
    generated = {name for name, _ in split(parse(PLACES_LUA).code)}
    for name, definition in LIBRARY.items():
        if name not in generated:
            assert not _ENTERING.search(definition), name
    for name, script in SCRIPTS.items():
        assert not _ENTERING.search(script.lua), name

"""POST /jobs/batch (issue 40, item 2): each job made or refused alone, as POST /jobs would, in
order; the envelope and the body's size refused whole; one Idempotency-Key for the batch; on
three shards each job where it would go alone, one Redis round trip per shard."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store import shard_placement
from scheduler.store.jobs import JobStore
from scheduler.store.keys import Keys
from scheduler.store.operation import Together
from scheduler.store.shards import Layout, node_shard
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
    submit,
)

GOOD = {"command": "echo ok"}


def post(api: TestClient, jobs: Any, key: str | None = None, **options: Any) -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    body = jobs if isinstance(jobs, bytes) else json.dumps({"jobs": jobs}).encode()
    return api.post("/jobs/batch", content=body, headers=headers, **options)


def answered(response: Any) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = assert_json(response)["jobs"]
    return entries


def job_count(rclient: redis.Redis, settings: Settings) -> int:
    return int(rclient.zcard(Keys(settings.redis_prefix).all_jobs))


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_body_bytes=1024, max_batch_bytes=8192)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "n1", "n2")
    return client


@BOTH_FRONTS
def test_each_job_is_made_or_refused_alone_in_order(api: TestClient) -> None:
    """Through the lane's server too, which hands the route to ASGI (lane_checked_client)."""
    jobs = [
        {"command": "echo first", "priority": 5},
        {"env_vars": {"A": "1"}},
        {"command": "x", "priority": "high"},
        {"command": "x", "priorty": 1},
        7,
        {"command": "x", "cpus": 99999},
        {"command": "rm\u0000 -rf"},
        {"command": "x", "after": ["job-404"]},
        {"command": "x", "instance_id": "i-1"},
        {"command": "x", "run_at": "tomorrow"},
        {"command": "echo last", "delay_secs": 600},
    ]
    entries = answered(post(api, jobs))
    assert entries == [
        {"job_id": "job-1"},
        {"error": "command or deploy_url is required", "status": 400, "field": "command"},
        {
            "error": "failed to decode job: priority: must be an integer between -1000 and "
            "1000, got a string",
            "status": 400,
            "field": "priority",
        },
        {
            "error": "failed to decode job: priorty: unknown field (did you mean priority?)",
            "status": 400,
        },
        {
            "error": "failed to decode job: body: must be a JSON object, got an integer",
            "status": 400,
        },
        {"error": "invalid cpus 99999: use 0 to 65536", "status": 400, "field": "cpus"},
        {"error": "invalid command: must not contain NUL bytes", "status": 400, "field": "command"},
        {"error": "invalid after: job-404 is not a job", "status": 400, "field": "after"},
        {"error": "instance not found", "status": 503},
        {
            "error": "invalid run_at 'tomorrow': use RFC 3339 with a zone",
            "status": 400,
            "field": "run_at",
        },
        {"job_id": "job-2"},
    ]
    first, last = (assert_json(api.get(f"/jobs/{i}")) for i in ("job-1", "job-2"))
    assert (first["command"], first["priority"], first["status"]) == ("echo first", 5, "pending")
    assert first["node_id"] in ("n1", "n2")
    assert (last["command"], last["status"]) == ("echo last", "delayed")
    assert [j["job_id"] for j in assert_json(api.get("/jobs"))] == ["job-1", "job-2"]
    # What POST /jobs answers the same job, word for word.
    alone = api.post("/jobs", json={"command": "x", "priority": "high"})
    assert alone.status_code == 400 and alone.text == entries[2]["error"] + "\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "invalid batch: body: empty (send a JSON object)"),
        (b"[]", "invalid batch: body: must be a JSON object, got an array"),
        (b"{}", "invalid batch: jobs: required"),
        (
            b'{"jobs": {}}',
            "invalid batch: jobs: must be a list of JSON values, got an object",
        ),
        (b'{"jobs": [], "x": 1}', "invalid batch: x: unknown field"),
        (b'{"jobs": []}', "invalid jobs: send 1 to 1000 jobs, not 0"),
        (
            b'{"jobs": [' + b",".join([b"{}"] * 1001) + b"]}",
            "invalid jobs: send 1 to 1000 jobs, not 1001",
        ),
        (b'{"jobs": [{"command": "x"}' + b"]" * 5, "invalid batch: body: not valid JSON"),
        (
            b'{"jobs": [{"command": "x", "env_vars": ' + b"[" * 3000 + b"]" * 3000 + b"}]}",
            "invalid batch: body: JSON nested too deeply",
        ),
    ],
)
def test_a_bad_envelope_is_refused_whole(
    api: TestClient, rclient: redis.Redis, settings: Settings, body: bytes, message: str
) -> None:
    refused = post(api, body)
    assert refused.status_code == 400 and refused.text.startswith(message), refused.text
    assert job_count(rclient, settings) == 0


def test_a_batch_too_large_is_refused_before_it_is_read(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    """An attacker's thousand jobs of 1 MiB each: MAX_BATCH_BYTES bounds the whole body
    (413 from its declared size, or once the bytes read pass it without one) and
    MAX_BODY_BYTES each job, as POST /jobs bounds its body."""
    huge = [{"command": "x" * 1000} for _ in range(9)]  # ~9 KiB, over the batch's 8 KiB
    assert_text_error(post(api, huge), 413, "request body too large (limit 8192 bytes)")
    body = json.dumps({"jobs": huge}).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield from (body[i : i + 1000] for i in range(0, len(body), 1000))

    unsized = api.post("/jobs/batch", content=chunks())
    assert_text_error(unsized, 413, "request body too large (limit 8192 bytes)")
    # A job over MAX_BODY_BYTES is refused alone, as POST /jobs refuses its body.
    entries = answered(post(api, [GOOD, {"command": "y" * 1100}, GOOD]))
    assert entries[1] == {"error": "job too large (limit 1024 bytes)", "status": 413}
    assert [e.get("job_id") for e in entries] == ["job-1", None, "job-2"]
    assert job_count(rclient, settings) == 2


def test_a_key_makes_the_batch_once(
    api: TestClient, make_client: ClientFactory, rclient: redis.Redis, settings: Settings
) -> None:
    jobs = [{"command": "echo a", "env_vars": {"B": "2", "A": "1"}}, {"cpus": -1}, GOOD]
    first = answered(post(api, jobs, "order-17"))
    assert [e.get("job_id") for e in first] == ["job-1", None, "job-2"]
    assert answered(post(api, jobs, "order-17")) == first  # a replay: the same answer
    # The same jobs in other words (field order, spacing) are the same batch.
    reworded = b'{"jobs":[{"env_vars":{"A":"1","B":"2"},"command":"echo a"},{"cpus":-1},GOOD]}'
    reworded = reworded.replace(b"GOOD", json.dumps(GOOD).encode())
    assert answered(post(api, reworded, "order-17")) == first
    # Another batch under the key, however it differs, is refused whole and makes nothing.
    for other in ([*jobs, GOOD], jobs[:1], [jobs[0], {"cpus": 1}, GOOD]):
        refused = post(api, other, "order-17")
        assert_text_error(refused, 422, "Idempotency-Key already used with another request")
    assert job_count(rclient, settings) == 2
    # The batch's key is its own: POST /jobs under it makes a job of its own.
    assert api.post("/jobs", json=GOOD, headers={"Idempotency-Key": "order-17"}).status_code == 201
    invalid = post(api, jobs, "with space")
    assert_text_error(
        invalid, 400, "invalid Idempotency-Key: use 1 to 255 visible ASCII characters"
    )
    # On another replica (another app on the same Redis), the same answer.
    other_app = make_client(settings)
    assert answered(post(other_app, jobs, "order-17")) == first
    assert job_count(rclient, settings) == 3


def test_a_replay_makes_the_jobs_that_failed_and_no_other(
    make_client: ClientFactory, settings: Settings
) -> None:
    api = make_client(settings)  # no node yet: a job asking nothing is 503, as POST /jobs
    jobs = [{"command": "waits", "cpus": 1}, {"command": "needs a node"}]
    first = answered(post(api, jobs, "retry-me"))
    assert first[0]["job_id"] == "job-1"  # a job asking a fit waits, unplaced
    assert first[1] == {"error": "no healthy compute nodes", "status": 503}
    register(api, "n1")
    again = answered(post(api, jobs, "retry-me"))
    assert again == [{"job_id": "job-1"}, {"job_id": "job-2"}]
    assert answered(post(api, jobs, "retry-me")) == again


def test_jobs_of_a_batch_may_run_after_jobs_made_before(api: TestClient) -> None:
    """`after` names jobs that exist, as POST /jobs; a job of the same batch has no id yet
    (a client sends the later ones once the first batch answered theirs)."""
    made = [e["job_id"] for e in answered(post(api, [GOOD, GOOD]))]
    later = answered(
        post(api, [{"command": "later", "after": made}, {"command": "x", "after": ["$0"]}])
    )
    waiting = assert_json(api.get(f"/jobs/{later[0]['job_id']}"))
    assert (waiting["status"], waiting["after"]) == ("waiting", made)
    assert later[1] == {
        "error": "invalid after: '$0' is not a job id like job-42",
        "status": 400,
        "field": "after",
    }


# Three shards: each job where it would go alone, one round trip per shard.

SHARDS = 3
LAYOUT = Layout(SHARDS)


def shard_node(shard: int, skip: int = 0) -> str:
    return [f"n{i}" for i in range(1, 200) if node_shard(f"n{i}", SHARDS) == shard][skip]


@pytest.fixture
def sharded(make_client: ClientFactory, make_settings: SettingsFactory) -> TestClient:
    api = make_client(make_settings(shards=SHARDS, max_jobs_per_node=100))
    register(api, *(shard_node(k) for k in range(SHARDS)))
    return api


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Each round trip of jobs made together the API's store sends a shard (driving.in_step):
    (shard, the calls it carries). Not counted: what the store asks now and then of its own
    (which shards have live nodes: cached a second)."""
    sent: list[tuple[int, int]] = []
    step = JobStore._step

    async def counted(self: JobStore, shard: Any, what: Any) -> Any:
        if isinstance(what, Together) and what.tolerant:
            sent.append((shard.here.index, len(what.steps)))
        return await step(self, shard, what)

    monkeypatch.setattr(JobStore, "_step", counted)
    return sent


def test_a_sharded_batch_goes_where_its_jobs_would_alone_in_a_round_trip_per_shard(
    sharded: TestClient, round_trips: list[tuple[int, int]]
) -> None:
    made = [
        e["job_id"] for e in answered(post(sharded, [{"command": f"echo {i}"} for i in range(9)]))
    ]
    assert sorted(LAYOUT.job_shard(job_id) for job_id in made) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert sorted(round_trips) == [(0, 3), (1, 3), (2, 3)]  # in turn over the live shards
    for job_id in made:
        job = assert_json(sharded.get(f"/jobs/{job_id}"))
        assert node_shard(job["node_id"], SHARDS) == LAYOUT.job_shard(job_id)
    # Jobs that run after others go to their shard; one whose dependencies are on two is
    # refused alone, as POST /jobs refuses it.
    by_shard = {LAYOUT.job_shard(job_id): job_id for job_id in made}
    round_trips.clear()
    later = answered(
        post(
            sharded,
            [{"command": "after", "after": [by_shard[k]]} for k in range(SHARDS)]
            + [{"command": "x", "after": [by_shard[0], by_shard[1]]}],
        )
    )
    assert [LAYOUT.job_shard(e["job_id"]) for e in later[:3]] == [0, 1, 2]
    assert later[3]["status"] == 400 and later[3]["error"].startswith("after: ")
    assert sorted(round_trips) == [(0, 1), (1, 1), (2, 1)]


def test_a_batch_asks_which_shards_have_live_nodes_once(
    sharded: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[float] = []
    live_compute = shard_placement.live_compute

    def counted(now: float) -> Any:
        asked.append(now)
        return live_compute(now)

    monkeypatch.setattr(shard_placement, "live_compute", counted)
    placement = sharded.app.state.store.placement  # type: ignore[attr-defined]
    placement._live = (0.0, [])  # what it learnt is out of date
    assert len(answered(post(sharded, [GOOD] * 30))) == 30
    assert len(asked) == SHARDS  # once per shard, not once per job


def test_a_job_no_node_of_its_first_shard_fits_goes_on_to_the_next(
    sharded: TestClient, round_trips: list[tuple[int, int]]
) -> None:
    big = shard_node(2, skip=1)
    body = {"id": big, "hostname": big, "cpu_count": 16, "role": "compute"}
    assert sharded.post("/nodes/register", json=body).status_code == 201
    entries = answered(post(sharded, [{"command": "big", "cpus": 4}] * 3 + [GOOD] * 3))
    jobs = [assert_json(sharded.get(f"/jobs/{e['job_id']}")) for e in entries]
    assert [j["node_id"] for j in jobs[:3]] == [big] * 3  # the others have 2 cpus
    assert {node_shard(j["node_id"], SHARDS) for j in jobs[3:]} == {0, 1, 2}
    # A round for every job's first shard (the live shards in turn), then the big ones' next
    # (one round trip a shard each), as six POST /jobs would have walked.
    assert sorted(round_trips[:3]) == [(0, 2), (1, 2), (2, 2)]
    assert sorted(round_trips[3:]) == [(1, 1), (2, 1), (2, 1)]


def test_a_sharded_key_replays_from_whichever_shards(sharded: TestClient) -> None:
    jobs = [{"command": f"echo {i}"} for i in range(9)]
    first = answered(post(sharded, jobs, "spread"))
    assert {LAYOUT.job_shard(e["job_id"]) for e in first} == {0, 1, 2}  # each by its key
    assert answered(post(sharded, jobs, "spread")) == first
    refused = post(sharded, jobs[:8], "spread")
    assert_text_error(refused, 422, "Idempotency-Key already used with another request")
    assert len(assert_json(sharded.get("/jobs"))) == 9
    alone = submit(sharded, command="one more")
    assert alone["job_id"] not in {e["job_id"] for e in first}

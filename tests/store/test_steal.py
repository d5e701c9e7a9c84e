"""Work stealing (issue 40, item 1; docs/GUIDE.md, Work stealing): a node whose queue is empty
takes, in its poll's one script, the oldest jobs it may run that another node's poll left
waiting; never a job bound to an instance, pinned by a label it lacks, or asking room it has
not; never from a queue whose claims are bare (the original agent's); no job runs twice."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store.keys import Keys
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    SettingsFactory,
    assert_json,
    register,
    report,
    submit,
)

NAMED = {"claims": "named"}


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(node_ttl_secs=600, max_jobs_per_node=2)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def poll(api: TestClient, node: str, **params: Any) -> list[dict[str, Any]]:
    query = {"node_id": node, "status": "pending", **params}
    jobs: list[dict[str, Any]] = assert_json(api.get("/jobs", params=query))
    return jobs


def ids(jobs: list[dict[str, Any]]) -> list[str]:
    return [job["job_id"] for job in jobs]


def backlog(rclient: redis.Redis, settings: Settings) -> dict[str, float]:
    entries: Any = rclient.zrange(Keys(settings.redis_prefix).backlog, 0, -1, withscores=True)
    return {node.decode(): score for node, score in entries}


def queued_on_a(api: TestClient, count: int, **fields: Any) -> list[str]:
    """`count` jobs on node a alone; node b registered after them, its queue empty."""
    register(api, "a")
    made = [submit(api, command=f"echo {i}", **fields)["job_id"] for i in range(count)]
    register(api, "b")
    return made


@BOTH_FRONTS
def test_an_idle_node_takes_the_oldest_jobs_a_named_poll_left_waiting(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    made = queued_on_a(api, 5)
    # a's agent takes one now and names its claims: four are left waiting, and noted.
    assert ids(poll(api, "a", capacity="1", **NAMED)) == made[:1]
    assert backlog(rclient, settings) == {"a": 4}
    # b polls as the original agent does (no parameter of ours) and takes its room's worth,
    # the oldest after the one handed to a.
    taken = poll(api, "b")
    assert ids(taken) == made[1:3]
    assert {job["node_id"] for job in taken} == {"b"}
    assert {job["taken_from"] for job in taken} == {"a"}
    assert backlog(rclient, settings) == {"a": 2}
    # Each job runs once: the original agent's bare claim on b; a's claim of a job it was
    # handed before it was taken (here none) is refused, as is a claim of b's by a.
    assert report(api, made[0], "running", node_id="a").status_code == 200
    assert report(api, made[1], "running").status_code == 200
    assert report(api, made[2], "running", node_id="a").status_code == 409
    record = assert_json(api.get(f"/jobs/{made[2]}"))
    assert (record["node_id"], record["taken_from"], record["status"]) == ("b", "a", "pending")
    # The job's move is an event, from a's queue to b's.
    events = api.get("/events", params={"job_id": made[1], "after": "0", "follow": "0"})
    assert '"status":"pending","at"' in events.text
    assert '"old_status":"pending","node_id":"b","old_node_id":"a"}' in events.text


def test_the_original_agents_queue_is_never_taken_from(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    made = queued_on_a(api, 4)
    # Its claims are bare: a job it was handed could be claimed after a theft and run twice.
    assert ids(poll(api, "a", capacity="1")) == made[:1]
    assert backlog(rclient, settings) == {}
    assert poll(api, "b") == []
    assert {assert_json(api.get(f"/jobs/{j}"))["node_id"] for j in made} == {"a"}


def test_a_node_at_capacity_notes_its_whole_queue(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    made = queued_on_a(api, 3)
    assert poll(api, "a", capacity="0", **NAMED) == []
    assert backlog(rclient, settings) == {"a": 3}
    # Nothing was handed to a: b starts from the head of its queue.
    assert ids(poll(api, "b", capacity="1")) == made[:1]
    assert backlog(rclient, settings) == {"a": 2}


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"node_selector": {"node.id": "a"}}, "pinned to a by its node.id label"),
        ({"node_selector": {"pool": "gpu"}}, "a label b lacks"),
        ({"cpus": 3}, "more cpus than b has free (2)"),
    ],
)
def test_a_job_the_taker_may_not_run_stays_and_the_next_one_is_taken(
    api: TestClient, rclient: redis.Redis, settings: Settings, fields: dict[str, Any], why: str
) -> None:
    body = {
        "id": "a",
        "hostname": "a",
        "cpu_count": 8,
        "role": "compute",
        "labels": {"pool": "gpu"},
    }
    assert api.post("/nodes/register", json=body).status_code == 201
    first = submit(api, command="first")["job_id"]
    pinned = submit(api, command="pinned", **fields)["job_id"]
    free = submit(api, command="free")["job_id"]
    register(api, "b")
    assert ids(poll(api, "a", capacity="1", **NAMED)) == [first]
    assert ids(poll(api, "b", capacity="1")) == [free], why
    assert assert_json(api.get(f"/jobs/{pinned}"))["node_id"] == "a"
    assert backlog(rclient, settings) == {"a": 1}


def test_the_highest_priority_waiting_goes_first(api: TestClient) -> None:
    register(api, "a")
    low = [submit(api, command="low", priority=-1)["job_id"] for _ in range(3)]
    high = submit(api, command="high", priority=5)["job_id"]
    register(api, "b")
    assert ids(poll(api, "a", capacity="1", **NAMED)) == [high]
    assert ids(poll(api, "b", capacity="1")) == [low[0]]


@pytest.mark.parametrize("who", ["ghost", "drained"])
def test_a_node_that_may_not_take_takes_nothing(
    api: TestClient, rclient: redis.Redis, settings: Settings, who: str
) -> None:
    """An id no one registered (open mode lets anyone poll any id: its queue would hold the
    jobs forever) and a drained node take nothing; the note stays for others."""
    made = queued_on_a(api, 3)
    assert ids(poll(api, "a", capacity="1", **NAMED)) == made[:1]
    if who == "drained":
        assert api.post("/nodes/b/drain").status_code == 200
    assert poll(api, "ghost" if who == "ghost" else "b") == []
    assert backlog(rclient, settings) == {"a": 2}
    assert {assert_json(api.get(f"/jobs/{j}"))["node_id"] for j in made} == {"a"}


def test_stale_notes_leave_the_backlog(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    made = queued_on_a(api, 3)
    assert poll(api, "a", capacity="1", **NAMED) != []
    for job in made:
        assert api.delete(f"/jobs/{job}").status_code in (200, 202)
    # b finds a's queue empty: the note goes.
    assert poll(api, "b") == []
    assert backlog(rclient, settings) == {}


def test_a_registration_drops_its_nodes_note(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    """The node's next agent may make bare claims: its own polls note its queue again."""
    queued_on_a(api, 2)
    assert poll(api, "a", capacity="0", **NAMED) == []
    assert backlog(rclient, settings) == {"a": 2}
    register(api, "a")
    assert backlog(rclient, settings) == {}


def test_work_stealing_off_leaves_jobs_where_placed(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings(node_ttl_secs=600, max_jobs_per_node=2, work_stealing="off")
    api = make_client(settings)
    made = queued_on_a(api, 3)
    assert ids(poll(api, "a", capacity="1", **NAMED)) == made[:1]
    assert backlog(rclient, settings) == {}
    assert poll(api, "b") == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"capacity": "-1"}, "invalid capacity"),
        ({"capacity": "x"}, "invalid capacity"),
        ({"capacity": "10001"}, "invalid capacity"),
        ({"claims": "bare"}, "invalid claims"),
    ],
)
@BOTH_FRONTS
def test_a_bad_capacity_or_claims_is_a_400_and_changes_nothing(
    api: TestClient, rclient: redis.Redis, settings: Settings, query: dict[str, str], message: str
) -> None:
    made = queued_on_a(api, 2)
    params = {"node_id": "a", "status": "pending", "claims": "named", **query}
    response = api.get("/jobs", params=params)
    assert response.status_code == 400 and message in response.text
    assert backlog(rclient, settings) == {}
    assert ids(poll(api, "a")) == made


@BOTH_FRONTS
def test_token_mode_a_nodes_token_poll_is_noted_and_its_claim_of_a_taken_job_is_404(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """With node tokens every claim names its node: any node's queue may be taken from, and
    a token reaches only its own node's jobs (the taken job is another node's now)."""
    key = {"Authorization": "Bearer steal-key"}
    settings = make_settings(max_jobs_per_node=2, api_key="steal-key", agent_auth="token")
    api = make_client(settings)

    def join(node: str) -> dict[str, str]:
        body = {"id": node, "hostname": node, "cpu_count": 2, "role": "compute"}
        registered = assert_json(api.post("/nodes/register", json=body, headers=key), 201)
        return {"Authorization": f"Bearer {registered['token']}"}

    a = join("a")
    made = [assert_json(api.post("/jobs", json={"command": "x"}, headers=key), 201) for _ in "xyz"]
    b = join("b")
    query = {"status": "pending", "capacity": "1"}
    handed = assert_json(api.get("/jobs", params={"node_id": "a", **query}, headers=a))
    assert [j["job_id"] for j in handed] == [made[0]["job_id"]]
    assert backlog(rclient, settings) == {"a": 2}
    # b's token cannot poll for a (a node token reaches its own node only) ...
    assert api.get("/jobs", params={"node_id": "a", **query}, headers=b).status_code == 403
    # ... and b's own poll takes from a's queue.
    taken = assert_json(api.get("/jobs", params={"node_id": "b", **query}, headers=b))
    assert [j["job_id"] for j in taken] == [made[1]["job_id"]]
    claim = {"status": "running"}
    assert api.patch(f"/jobs/{made[1]['job_id']}", json=claim, headers=a).status_code == 404
    assert api.patch(f"/jobs/{made[1]['job_id']}", json=claim, headers=b).status_code == 200

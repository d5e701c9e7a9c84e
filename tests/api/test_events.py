"""GET /events: one event per change of a job's status (or node), written by the script that
makes it; an ending's number is its SNS outbox entry's; filtered; resumed after a position;
followed from a real server as changes happen."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from scheduler.store.keys import Keys
from tests.api.test_logs import sse_events
from tests.conftest import Serve, register, report, submit


def backlog(api: Any, query: str = "", headers: dict[str, str] | None = None) -> list[Any]:
    """The events kept (from the oldest, or after a position), as follow=0 answers them."""
    response = api.get(f"/events?follow=0&{query or 'after=0'}", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return list(sse_events(iter(response.text.split("\n"))))


@pytest.fixture
def api(client: TestClient) -> TestClient:
    register(client, "n1")
    return client


def test_each_change_of_a_job_is_one_event(api: TestClient) -> None:
    job = submit(api, command="true")
    job_id = job["job_id"]
    report(api, job_id, "running", node_id="n1")
    report(api, job_id, "done", node_id="n1", exit_code=0)
    events = backlog(api)
    assert [e["event"] for e in events] == ["job"] * 3
    data = [e["data"] for e in events]
    assert [(d.get("old_status", ""), d["status"]) for d in data] == [
        ("", "pending"),
        ("pending", "running"),
        ("running", "done"),
    ]
    assert {d["job_id"] for d in data} == {job_id} and {d["node_id"] for d in data} == {"n1"}
    numbers = [d["number"] for d in data]
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    assert all(d["at"].endswith("Z") for d in data)


def test_an_endings_number_is_its_outbox_entrys(api: TestClient, rclient: Any, prefix: str) -> None:
    job_id = submit(api, command="true")["job_id"]
    api.delete(f"/jobs/{job_id}")
    (entry,) = rclient.lrange(Keys(prefix).outbox, 0, -1)
    number = int(entry.split(b" ", 1)[0])
    ending = backlog(api)[-1]["data"]
    assert ending["number"] == number
    assert (ending["status"], ending["failure_reason"]) == ("failed", "cancelled")


def test_a_retry_is_a_move_back_to_pending_and_one_ending(make_client: Any) -> None:
    api = make_client(max_job_retries=1)
    register(api, "n1")
    job_id = submit(api, command="false")["job_id"]
    for _ in range(2):
        report(api, job_id, "running", node_id="n1")
        report(api, job_id, "failed", node_id="n1", exit_code=1)
    moves = [(d.get("old_status", ""), d["status"]) for d in (e["data"] for e in backlog(api))]
    assert moves == [
        ("", "pending"),
        ("pending", "running"),
        ("running", "pending"),
        ("pending", "running"),
        ("running", "failed"),
    ]


def test_filters_and_positions(api: TestClient) -> None:
    first = submit(api, command="a")["job_id"]
    second = submit(api, command="b")["job_id"]
    report(api, second, "running", node_id="n1")
    assert [e["data"]["job_id"] for e in backlog(api, f"after=0&job_id={second}")] == [second] * 2
    running = backlog(api, "after=0&status=running")
    assert [(e["data"]["job_id"], e["data"]["status"]) for e in running] == [(second, "running")]
    assert backlog(api, "after=0&node_id=n2") == []
    everything = backlog(api)
    assert [e["data"]["job_id"] for e in everything] == [first, second, second]
    # After the first event's id: the rest, by parameter or by Last-Event-ID.
    position = everything[0]["id"]
    assert backlog(api, f"after={position}") == everything[1:]
    assert backlog(api, "after=", headers={"last-event-id": position}) == everything[1:]
    # Without a position: from now on, so a backlog read is empty.
    assert backlog(api, "after=") == []


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("status=bogus", "status"),
        ("after=abc", "after"),
        ("after=1-0,2-0", "after"),  # one shard: one position
        ("node_id=a%20b", "node_id"),
        ("job_id=a%20b", "job_id"),  # a filter: a 400, not a job's 404
        ("follow=maybe", "follow"),
        ("schedule=a%2Fb", "schedule"),
    ],
)
def test_bad_parameters_are_400s(api: TestClient, query: str, name: str) -> None:
    response = api.get(f"/events?{query}")
    assert response.status_code == 400 and f"invalid {name}" in response.text, response.text


def test_a_follower_is_told_what_was_trimmed(api: TestClient, rclient: Any, prefix: str) -> None:
    ids = [submit(api, command="x")["job_id"] for _ in range(3)]
    events = backlog(api)
    # Every event so far trimmed away (as EVENTS_RETAIN_SECS would), the resumed one too.
    rclient.xdel(Keys(prefix).events, *(event["id"] for event in events))
    submit(api, command="y")
    resumed = backlog(api, f"after={events[0]['id']}")
    assert resumed[0]["event"] == "dropped" and resumed[0]["data"] == {"shard": 0}
    assert resumed[1]["data"]["job_id"] not in ids


def test_events_need_the_key(make_client: Any) -> None:
    api = make_client(api_key="k" * 40)
    for path in ("/events", "/jobs/job-1/logs", "/jobs/job-1/logs?follow=1"):
        assert api.get(path).status_code == 401
        assert api.get(path, headers={"authorization": "Bearer wrong-key"}).status_code == 401


def test_a_follower_gets_each_change_as_it_happens(serve: Serve) -> None:
    with httpx.Client(base_url=serve(follow_max_secs=60), timeout=30) as http:
        register(http, "n1")  # type: ignore[arg-type]
        ready = threading.Event()
        made: list[str] = []

        def changes() -> None:
            ready.wait(30)
            job_id = submit(http, command="x")["job_id"]  # type: ignore[arg-type]
            made.append(job_id)
            report(http, job_id, "running", node_id="n1")
            report(http, job_id, "done", node_id="n1", exit_code=0)

        threading.Thread(target=changes).start()
        seen = []
        with http.stream("GET", "/events") as response:
            lines = response.iter_lines()
            assert next(lines).startswith("id: ")  # open: its "now" is a position already
            ready.set()
            for event in sse_events(lines):
                seen.append(event["data"]["status"])
                if event["data"]["status"] == "done":
                    break
        assert seen == ["pending", "running", "done"]


def test_a_resumed_follower_counts_what_was_trimmed_after_its_event(
    api: TestClient, rclient: Any, prefix: str
) -> None:
    for _ in range(4):
        submit(api, command="x")
    events = backlog(api)
    for gone in events[1:3]:  # the second and third trimmed, the first kept
        rclient.xdel(Keys(prefix).events, gone["id"])
    resumed = backlog(api, f"after={events[0]['id']}")
    assert resumed[0]["event"] == "dropped" and resumed[0]["data"] == {"shard": 0, "events": 2}
    assert resumed[1:] == events[3:]

"""Live output (POST /jobs/{id}/output, GET /jobs/{id}/logs): a chunk held once at its
offset, in order, capped, per attempt; read as text and followed as Server-Sent Events from a
real server until the job ends."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store import ops
from scheduler.store.jobs import JobStore
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import Serve, assert_json, assert_text_error, register, report, submit


def claimed(api: Any, node: str = "n1") -> str:
    """A job submitted (`node` the only node) and claimed there (running); its id."""
    job = submit(api, command="echo hi")
    assert job["node_id"] == node
    assert report(api, job["job_id"], "running", node_id=node).status_code == 200
    return str(job["job_id"])


def send(api: Any, job_id: str, data: str, offset: int, stream: str = "stdout", **kw: Any) -> Any:
    body = {"node_id": kw.pop("node", "n1"), "stream": stream, "offset": offset, "data": data}
    return api.post(f"/jobs/{job_id}/output", json=body, **kw)


@pytest.fixture
def api(client: TestClient) -> TestClient:
    register(client, "n1")
    return client


def test_chunks_are_held_in_order_and_read_as_text(api: TestClient) -> None:
    job_id = claimed(api)
    assert assert_json(send(api, job_id, "one\n", 0)) == {"offset": 4}
    assert assert_json(send(api, job_id, "oops\n", 0, "stderr")) == {"offset": 5}
    assert assert_json(send(api, job_id, "two\n", 4)) == {"offset": 8}
    logs = api.get(f"/jobs/{job_id}/logs")
    assert logs.status_code == 200 and logs.text == "one\noops\ntwo\n"
    assert logs.headers["content-type"] == "text/plain; charset=utf-8"
    assert logs.headers["x-attempt"] == "1"
    assert api.get(f"/jobs/{job_id}/logs?stream=stdout").text == "one\ntwo\n"
    assert api.get(f"/jobs/{job_id}/logs?stream=stderr").text == "oops\n"


def test_a_chunk_sent_again_is_held_once_and_a_gap_is_refused(api: TestClient) -> None:
    job_id = claimed(api)
    assert assert_json(send(api, job_id, "abc", 0)) == {"offset": 3}
    assert assert_json(send(api, job_id, "abc", 0)) == {"offset": 3}  # its answer was lost
    assert assert_json(send(api, job_id, "bcd", 1)) == {"offset": 4}  # overlaps: the rest
    gap = send(api, job_id, "zzz", 10)
    assert gap.status_code == 409 and gap.json()["offset"] == 4
    assert api.get(f"/jobs/{job_id}/logs").text == "abcd"


def test_output_is_refused_unless_the_job_runs_on_that_node(api: TestClient) -> None:
    pending = submit(api, command="x")["job_id"]
    assert_text_error(send(api, pending, "x", 0), 404, "job not running on this node")
    job_id = claimed(api)
    register(api, "n2")
    assert_text_error(send(api, job_id, "x", 0, node="n2"), 404, "job not running on this node")
    assert report(api, job_id, "done", node_id="n1", exit_code=0).status_code == 200
    assert_text_error(send(api, job_id, "late", 0), 404, "job not running on this node")
    assert api.get(f"/jobs/{job_id}/logs").text == ""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"node_id": "n1", "stream": "stdin", "offset": 0, "data": "x"}, "stream"),
        ({"node_id": "n1", "stream": "stdout", "offset": -1, "data": "x"}, "offset"),
        ({"node_id": "n1", "stream": "stdout", "offset": 0, "data": ""}, "data"),
        ({"node_id": "n1", "stream": "stdout", "offset": 0, "data": "x" * 65537}, "data"),
        ({"stream": "stdout", "offset": 0, "data": "x"}, "node_id"),
    ],
)
def test_a_bad_chunk_is_a_400_naming_its_field(api: TestClient, body: Any, message: str) -> None:
    job_id = claimed(api)
    response = api.post(f"/jobs/{job_id}/output", json=body)
    assert response.status_code == 400 and message in response.text
    assert api.get(f"/jobs/{job_id}/logs").text == ""


def test_the_log_keeps_the_newest_bytes_up_to_its_cap(make_client: Any) -> None:
    api = make_client(log_max_bytes=65536)
    register(api, "n1")
    job_id = claimed(api)
    offset = 0
    for i in range(5):
        line = f"{i}" * 30000
        offset = assert_json(send(api, job_id, line, offset))["offset"]
    logs = api.get(f"/jobs/{job_id}/logs")
    assert logs.text == "3" * 30000 + "4" * 30000
    assert logs.headers["x-log-dropped"] == str(90000)


def test_each_attempt_keeps_its_own_output(make_client: Any) -> None:
    api = make_client(max_job_retries=1)
    register(api, "n1")
    job_id = claimed(api)
    send(api, job_id, "first try\n", 0)
    assert report(api, job_id, "failed", node_id="n1", exit_code=1).status_code == 200
    assert report(api, job_id, "running", node_id="n1").status_code == 200
    assert assert_json(send(api, job_id, "second\n", 0)) == {"offset": 7}  # offsets anew
    assert api.get(f"/jobs/{job_id}/logs").text == "second\n"
    assert api.get(f"/jobs/{job_id}/logs?attempt=1").text == "first try\n"
    assert api.get(f"/jobs/{job_id}/logs").headers["x-attempt"] == "2"
    # An attempt not made yet is said so, not answered as an empty output.
    later = api.get(f"/jobs/{job_id}/logs?attempt=3")
    assert (later.status_code, later.text) == (
        404,
        f"attempt not found: {job_id} is at attempt 2\n",
    )


def test_bad_parameters_are_400s_and_a_missing_job_a_404(api: TestClient) -> None:
    job_id = claimed(api)
    assert_text_error(api.get("/jobs/job-999/logs"), 404, "job not found")
    for query, name in [
        ("stream=stdin", "stream"),
        ("attempt=0", "attempt"),
        ("attempt=x", "attempt"),
        ("follow=yes", "follow"),
        ("follow=1&after=nope", "after"),
    ]:
        response = api.get(f"/jobs/{job_id}/logs?{query}")
        assert response.status_code == 400 and f"invalid {name}" in response.text, query


def test_the_log_goes_with_the_job_past_retention(
    make_client: Any, make_settings: Any, rclient: Any
) -> None:
    settings: Settings = make_settings(job_retention_secs=60)
    store = SyncJobStore.connect(settings)
    api = make_client(settings)
    register(api, "n1")
    job_id = claimed(api)
    send(api, job_id, "x", 0)
    assert report(api, job_id, "done", node_id="n1", exit_code=0).status_code == 200
    keys = Keys(settings.redis_prefix)
    assert rclient.exists(keys.job_log(job_id), keys.job_log_state(job_id)) == 2
    rclient.delete(keys.dirty)  # as a snapshot that has written it
    try:
        assert job_id in store.run(ops.upkeep.prune_finished(time.time() + 61))
    finally:
        store.close()
    assert rclient.exists(keys.job_log(job_id), keys.job_log_state(job_id)) == 0


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Each event of an SSE stream: its fields, `data` decoded."""
    event: dict[str, Any] = {}
    for line in lines:
        if line == "":
            if "data" in event:
                event["data"] = json.loads(event["data"])
                yield event
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            event[name] = value


def test_a_follower_sees_output_as_it_comes_until_the_job_ends(serve: Serve) -> None:
    url = serve(follow_max_secs=60)
    with httpx.Client(base_url=url, timeout=30) as http:
        register(http, "n1")  # type: ignore[arg-type]
        job_id = claimed(http)
        send(http, job_id, "before\n", 0)
        seen: list[dict[str, Any]] = []
        with http.stream("GET", f"/jobs/{job_id}/logs?follow=1") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = sse_events(response.iter_lines())
            status = next(events)  # first, the job's status; then each change
            assert (status["event"], status["data"]) == ("status", {"status": "running"})
            seen.append(next(events))
            assert seen[0]["data"] == {"stream": "stdout", "attempt": 1, "text": "before\n"}
            # Sent while the follower waits: it wakes and gets it.
            threading.Thread(target=send, args=(http, job_id, "after\n", 7)).start()
            seen.append(next(events))
            assert seen[1]["data"]["text"] == "after\n"
            report(http, job_id, "done", node_id="n1", exit_code=3)
            changed, end = next(events), next(events)
            assert (changed["event"], changed["data"]) == ("status", {"status": "done"})
            assert end["event"] == "end" and end["data"] == {"status": "done", "exit_code": 3}
        # Resumed after the first event: the rest only.
        headers = {"last-event-id": seen[0]["id"]}
        with http.stream("GET", f"/jobs/{job_id}/logs?follow=1", headers=headers) as response:
            rest = list(sse_events(response.iter_lines()))
        assert [e["event"] for e in rest] == ["status", "output", "end"]
        assert rest[1]["data"]["text"] == "after\n"


def test_a_job_the_rust_agent_runs_is_as_before(api: TestClient) -> None:
    """The original agent: a bare claim, no node_id, no live output, its output in the final
    report. The job reads as it did; its log is empty text, not an error; the poll answer
    is the job's record, with no null (the Rust agent drops a poll answer with one)."""
    job_id = submit(api, command="echo hi")["job_id"]
    polled = assert_json(api.get("/jobs?node_id=n1&status=pending"))
    assert polled == [assert_json(api.get(f"/jobs/{job_id}"))]
    assert report(api, job_id, "running").status_code == 200
    done = assert_json(report(api, job_id, "done", exit_code=0, stdout="hi\n", stderr=""))
    assert done["stdout"] == "hi\n"
    logs = api.get(f"/jobs/{job_id}/logs")
    assert (logs.status_code, logs.text) == (200, "")


def test_a_log_expires_a_while_after_its_last_chunk(
    make_client: Any, rclient: Any, prefix: str
) -> None:
    api = make_client(log_retain_secs=600)
    register(api, "n1")
    job_id = claimed(api)
    send(api, job_id, "x", 0)
    keys = Keys(prefix)
    for key in (keys.job_log(job_id), keys.job_log_state(job_id)):
        assert 0 < rclient.ttl(key) <= 600


def test_a_change_before_the_stream_watches_is_not_missed(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job ends after the follow's first read and before its stream subscribes: the
    stream still reads it (it reads after subscribing) and sends `end` at once, where it
    would wait for FOLLOW_MAX_SECS (an hour here: the test's timeout fails it first)."""
    url = serve(follow_max_secs=3600)
    original = JobStore.client_of_job
    with httpx.Client(base_url=url, timeout=90) as http:
        register(http, "n1")  # type: ignore[arg-type]
        job_id = claimed(http)
        send(http, job_id, "x\n", 0)

        async def ending_first(self: Any, job: str) -> Any:
            def end() -> None:
                with httpx.Client(base_url=url, timeout=30) as other:
                    assert report(other, job, "done", node_id="n1", exit_code=0).status_code == 200

            await asyncio.to_thread(end)
            return await original(self, job)

        monkeypatch.setattr(JobStore, "client_of_job", ending_first)
        with http.stream("GET", f"/jobs/{job_id}/logs?follow=1") as response:
            events = [e["event"] for e in sse_events(response.iter_lines())]
    assert events == ["status", "output", "end"]


@pytest.mark.parametrize(
    "after",
    ["99999999999999999999-0", "18446744073709551616-0", "1-18446744073709551616", "1-0,2-0"],
)
def test_a_position_redis_cannot_hold_is_a_400(api: TestClient, after: str) -> None:
    job_id = claimed(api)
    for path in (f"/jobs/{job_id}/logs?follow=1&after={after}", f"/events?after={after}"):
        response = api.get(path)
        assert response.status_code == 400 and "invalid after" in response.text, path


def test_a_retry_by_hand_starts_a_new_attempt_and_keeps_the_earlier_ones(
    make_client: Any,
) -> None:
    """Its attempts are numbered on over retries by hand (they once started again at 1,
    two attempts 1 in its list and the first run's output unreachable)."""
    api = make_client(max_job_retries=0)
    register(api, "n1")
    job_id = claimed(api)
    send(api, job_id, "OLD RUN\n", 0)
    assert report(api, job_id, "failed", node_id="n1", exit_code=1).status_code == 200
    assert api.post(f"/jobs/{job_id}/retry").status_code == 200
    assert api.get(f"/jobs/{job_id}/logs").text == ""  # attempt 2's, not started
    assert report(api, job_id, "running", node_id="n1").status_code == 200
    send(api, job_id, "NEW RUN\n", 0)
    logs = api.get(f"/jobs/{job_id}/logs")
    assert (logs.text, logs.headers["x-attempt"]) == ("NEW RUN\n", "2")
    assert api.get(f"/jobs/{job_id}/logs?attempt=1").text == "OLD RUN\n"
    assert report(api, job_id, "failed", node_id="n1", exit_code=2).status_code == 200
    assert api.post(f"/jobs/{job_id}/retry").status_code == 200
    assert api.delete(f"/jobs/{job_id}").status_code == 200  # cancelled before it ran
    attempts = api.get(f"/jobs/{job_id}/attempts").json()
    assert [(a["attempt"], a["reason"]) for a in attempts] == [
        (1, "failed"),
        (2, "failed"),
        (3, "cancelled"),
    ]
    job = api.get(f"/jobs/{job_id}").json()
    assert (job["retry_count"], job["earlier_attempts"]) == (0, 2)


def test_a_log_that_lost_its_entries_keeps_the_new_chunk(
    make_client: Any, rclient: Any, prefix: str
) -> None:
    """The stream lost what its count holds (evicted, or deleted by hand): the next chunk is
    held, the count made right, no error."""
    api = make_client(log_max_bytes=65536)
    register(api, "n1")
    job_id = claimed(api)
    offset = assert_json(send(api, job_id, "a" * 60000, 0))["offset"]
    rclient.delete(Keys(prefix).job_log(job_id))
    assert assert_json(send(api, job_id, "b" * 10000, offset)) == {"offset": 70000}
    assert api.get(f"/jobs/{job_id}/logs").text == "b" * 10000
    assert rclient.hget(Keys(prefix).job_log_state(job_id), "bytes") == b"10000"

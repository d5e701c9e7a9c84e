"""The Python client (scheduler.client.Client) against the real API over a socket: every
operation's answer, errors naming the field, and retries of lost answers that never make a
job twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from scheduler.client import (
    BadRequest,
    Client,
    Conflict,
    Ended,
    EventsDropped,
    JobEvent,
    Made,
    NotFound,
    Output,
    QueuePlace,
    Refused,
    SchedulerError,
    Unauthorized,
    Unreachable,
    WaitTimeout,
)
from tests.conftest import Serve
from tests.keys import API_KEY
from tests.redis_server import free_port


@pytest.fixture
def url(serve: Serve) -> str:
    url = serve(node_ttl_secs=600)
    register(url, "n1")
    return url


@pytest.fixture
def client(url: str) -> Iterator[Client]:
    with Client(url, retries=2, retry_pause=0.01) as made:
        yield made


def register(url: str, node: str) -> None:
    body = {"id": node, "hostname": node, "cpu_count": 4, "role": "compute"}
    assert httpx.post(f"{url}/nodes/register", json=body).status_code == 201


def report(url: str, job_id: str, status: str, **fields: Any) -> None:
    """Play the agent (open mode): a claim or an ending."""
    body = {"status": status, "node_id": "n1", **fields}
    assert httpx.patch(f"{url}/jobs/{job_id}", json=body).status_code == 200


def test_a_job_submitted_waited_for_and_its_output_read(client: Client, url: str) -> None:
    job = client.submit("echo hello", env_vars={"WHO": "me"}, priority=3)
    assert (job.status, job.priority, job.env_vars) == ("pending", 3, {"WHO": "me"})
    assert client.place(job.job_id) == QueuePlace(ahead=0, queued=1)

    def agent() -> None:
        report(url, job.job_id, "running")
        report(url, job.job_id, "done", exit_code=0, stdout="hello\n")

    threading.Thread(target=agent).start()
    ended = client.wait(job.job_id, timeout=60)
    assert (ended.status, ended.exit_code, ended.stdout) == ("done", 0, "hello\n")
    assert client.job(job.job_id) == ended
    [attempt] = client.attempts(job.job_id)
    assert (attempt.reason, attempt.exit_code) == ("done", 0)
    assert client.place(job.job_id) == QueuePlace()  # ended: in no queue


def test_a_wait_that_runs_out_says_so_with_the_job(client: Client) -> None:
    job = client.submit("sleep 100")
    with pytest.raises(WaitTimeout) as raised:
        client.wait(job.job_id, timeout=0.3)
    assert raised.value.job.job_id == job.job_id
    assert raised.value.job.status == "pending"


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        ({"priority": 5000}, "priority", "must be an integer between -1000 and 1000"),
        ({"priorty": 1}, "priorty", "unknown field (did you mean priority?)"),
        ({"env_vars": {"A": 1}}, "env_vars", ""),
        ({"cpus": -1}, "cpus", ""),
    ],
)
def test_a_wrong_field_is_bad_request_naming_it(
    client: Client, fields: dict[str, Any], field: str, rule: str
) -> None:
    with pytest.raises(BadRequest) as raised:
        client.submit("echo", **fields)
    assert (raised.value.status, raised.value.field) == (400, field)
    assert rule in raised.value.rule
    assert list(client.jobs()) == []  # nothing made


def test_errors_by_status(client: Client, url: str) -> None:
    with pytest.raises(NotFound):
        client.job("job-999")
    job = client.submit("echo")
    report(url, job.job_id, "running")
    report(url, job.job_id, "done", exit_code=0)
    with pytest.raises(Conflict):
        client.cancel(job.job_id)
    with pytest.raises(Conflict):
        client.retry(job.job_id)


def test_the_key_is_sent_and_a_wrong_one_is_unauthorized(serve: Serve) -> None:
    url = serve(api_key=API_KEY)
    register(url, "n1")
    with Client(url, API_KEY) as right:
        assert right.submit("echo").status in ("pending", "running")
    with Client(url, "wrong") as wrong, pytest.raises(Unauthorized):
        wrong.job("job-1")


def test_listing_pages_oldest_or_newest_first(client: Client) -> None:
    ids = [client.submit(f"echo {n}").job_id for n in range(5)]
    assert [j.job_id for j in client.jobs(page_size=2)] == ids
    assert [j.job_id for j in client.jobs(newest=True, page_size=2)] == ids[::-1]
    assert [j.job_id for j in client.jobs(after=ids[2])] == ids[3:]
    assert [j.job_id for j in client.jobs(status="failed")] == []


def test_cancel_retry_and_retry_many(client: Client) -> None:
    first, second = client.submit("a"), client.submit("b")
    assert client.cancel(first.job_id).failure_reason == "cancelled"
    assert client.retry(first.job_id).status == "pending"
    client.cancel(first.job_id)
    client.cancel(second.job_id)
    answer = client.retry_many([first.job_id, second.job_id, "job-404"])
    assert (answer.retried, answer.not_found) == ([first.job_id, second.job_id], ["job-404"])


def test_a_bulk_submit_answers_each_job_in_order(client: Client) -> None:
    entries = client.submit_many(
        [{"command": "a"}, {"command": "b", "cpus": -1}, {"command": "c"}], idempotency_key="k1"
    )
    assert isinstance(entries[0], Made) and isinstance(entries[2], Made)
    assert isinstance(entries[1], Refused) and (entries[1].status, entries[1].field) == (
        400,
        "cpus",
    )
    again = client.submit_many(
        [{"command": "a"}, {"command": "b", "cpus": -1}, {"command": "c"}], idempotency_key="k1"
    )
    assert again == entries
    assert len(list(client.jobs())) == 2


def test_output_followed_until_the_end_and_read_after(client: Client, url: str) -> None:
    job = client.submit("echo hi")
    report(url, job.job_id, "running")
    chunk = {"node_id": "n1", "stream": "stdout", "offset": 0, "data": "hi\n"}
    assert httpx.post(f"{url}/jobs/{job.job_id}/output", json=chunk).status_code == 200
    seen: list[Any] = []
    for item in client.follow_logs(job.job_id):
        seen.append(item)
        if isinstance(item, Output):
            report(url, job.job_id, "done", exit_code=0, stdout="hi\n")
    assert Output("stdout", 1, "hi\n") in seen
    assert seen[-1] == Ended("done", 0)
    logs = client.logs(job.job_id)
    assert (logs.text, logs.attempt, logs.dropped) == ("hi\n", 1, 0)


def test_events_kept_then_the_end(client: Client) -> None:
    job = client.submit("echo")
    client.cancel(job.job_id)
    items = list(client.events(job_id=job.job_id, since_start=True, follow=False))
    assert all(isinstance(item, JobEvent) for item in items)
    changes = [item.change for item in items if not isinstance(item, EventsDropped)]
    assert [(c.old_status, c.status) for c in changes] == [("", "pending"), ("pending", "failed")]
    # A position resumes after its event.
    rest = client.events(job_id=job.job_id, after=items[0].position, follow=False)
    assert [i.position for i in rest] == [items[1].position]


def test_nodes_drain_and_undrain(client: Client) -> None:
    assert list(client.nodes()) == ["n1"]
    assert client.nodes(role="storage") == {}
    client.submit("echo")
    drained = client.drain("n1")
    assert (drained.drained, drained.drained_by, drained.unplaced) == (True, "operator", 1)
    assert client.drain("n1").drained is True  # twice is once
    assert client.undrain("n1").undrained is True
    assert client.undrain("n1").undrained is False


def test_schedules(client: Client) -> None:
    made = client.add_schedule("nightly", {"command": "backup"}, cron="0 3 * * *")
    assert (made.cron, made.timezone, made.paused) == ("0 3 * * *", "UTC", False)
    assert made.next_run_at
    with pytest.raises(Conflict):
        client.add_schedule("nightly", {"command": "backup"}, every_secs=60)
    with pytest.raises(BadRequest) as raised:
        client.add_schedule("bad", {"command": "x"}, cron="99 * * * *")
    assert raised.value.status == 400
    client.add_schedule("often", {"command": "tick"}, every_secs=60, paused=True)
    assert [s.name for s in client.schedules(page_size=1)] == ["nightly", "often"]
    assert client.pause_schedule("nightly").paused is True
    assert client.resume_schedule("often").paused is False
    assert client.schedule("often").every_secs == 60
    client.delete_schedule("nightly")
    with pytest.raises(NotFound):
        client.schedule("nightly")


class LosingAnswers(httpx.BaseTransport):
    """The real server's transport, losing the answers of the first `lose` requests after
    the server has done them (a connection reset on the way back); `before`: refusing their
    connection instead; `drop`: losing them on the way there."""

    def __init__(self, lose: int, before: bool = False, drop: bool = False) -> None:
        self.inner, self.lose, self.before, self.drop = httpx.HTTPTransport(), lose, before, drop
        self.methods: list[str] = []  # of the requests the server got

    @property
    def sent(self) -> int:
        return len(self.methods)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.lose and (self.before or self.drop):
            self.lose -= 1
            if self.drop:  # sent, and lost before it arrived: the client cannot tell
                raise httpx.ReadError("connection reset by peer", request=request)
            raise httpx.ConnectError("connection refused", request=request)
        response = self.inner.handle_request(request)
        response.read()
        self.methods.append(request.method)
        if self.lose:
            self.lose -= 1
            response.close()
            raise httpx.ReadError("connection reset by peer", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def losing(url: str, lose: int, before: bool = False) -> tuple[Client, LosingAnswers]:
    transport = LosingAnswers(lose, before)
    return Client(url, transport=transport, retries=3, retry_pause=0.01), transport


def test_a_submit_whose_answer_was_lost_is_sent_again_and_makes_one_job(url: str) -> None:
    made, transport = losing(url, lose=2)
    with made:
        job = made.submit("echo once")
        assert transport.sent == 3  # done by the server three times, made once
        assert [j.job_id for j in made.jobs()] == [job.job_id]
        entries = made_batch(url)
        assert len(list(made.jobs())) == 1 + len(entries)


def made_batch(url: str) -> list[Any]:
    made, transport = losing(url, lose=1)
    with made:
        entries = made.submit_many([{"command": "a"}, {"command": "b"}])
    assert transport.sent == 2 and all(isinstance(e, Made) for e in entries)
    return entries


def test_a_cancel_whose_answer_was_lost_looks_before_it_is_sent_again(
    url: str, client: Client
) -> None:
    job = client.submit("echo")
    made, transport = losing(url, lose=1)
    with made:
        cancelled = made.cancel(job.job_id)  # done; its answer lost; the look says so
    assert cancelled.failure_reason == "cancelled"
    assert transport.methods == ["DELETE", "GET"]  # sent once


def test_a_cancel_lost_on_its_way_is_sent_again_after_the_look(url: str, client: Client) -> None:
    job = client.submit("echo")
    transport = LosingAnswers(1, drop=True)
    with Client(url, transport=transport, retry_pause=0.01) as made:
        assert made.cancel(job.job_id).failure_reason == "cancelled"
    assert transport.methods == ["GET", "DELETE"]  # the dropped one never arrived


def test_a_retry_by_hand_whose_answer_was_lost_is_not_sent_again(url: str, client: Client) -> None:
    job = client.submit("echo")
    client.cancel(job.job_id)
    made, transport = losing(url, lose=1)
    with made, pytest.raises(Unreachable, match="may have been done") as raised:
        made.retry(job.job_id)
    assert raised.value.maybe_done
    assert transport.methods == ["POST"]
    assert client.job(job.job_id).status == "pending"  # it was


def test_a_call_that_never_left_is_sent_again_whatever_it_is(url: str, client: Client) -> None:
    job = client.submit("echo")
    made, transport = losing(url, lose=2, before=True)
    with made:
        assert made.cancel(job.job_id).failure_reason == "cancelled"
    assert transport.sent == 1


def test_an_unreachable_scheduler_is_said_after_the_tries() -> None:
    nowhere = Client(f"http://127.0.0.1:{free_port()}", retries=1, retry_pause=0.01)
    with nowhere, pytest.raises(Unreachable, match=r"cannot reach the scheduler at http://127\."):
        nowhere.job("job-1")


def test_a_request_that_cannot_be_sent_is_the_calls_error_at_once(url: str) -> None:
    transport = LosingAnswers(0)
    with Client(url, transport=transport, retry_pause=5) as made:
        with pytest.raises(SchedulerError, match="cannot send the request") as raised:
            made.submit("echo", idempotency_key="k\r\nX-Injected: 1")
        assert not isinstance(raised.value, Unreachable)
    assert transport.sent == 0
    wrong = Client("ftp://127.0.0.1:1", retry_pause=5)
    with wrong, pytest.raises(SchedulerError, match="cannot send the request"):
        wrong.job("job-1")


def test_an_id_is_one_path_segment_whatever_it_holds(client: Client) -> None:
    """`../nodes` is a job id, quoted: never the nodes' route (or any other)."""
    client.drain("n1")
    for odd in ("../nodes", "..", ".", "job-1/../../nodes/n1/undrain", "a?b=c", "a#b"):
        with pytest.raises(NotFound):
            client.job(odd)
        with pytest.raises(NotFound):
            client.cancel(odd)
    assert client.nodes()["n1"].drained is True  # no undrain reached


def test_fail_fast_says_at_once_a_scheduler_is_not_there_then_waits_once_it_answered(
    url: str,
) -> None:
    """The CLI's client: no scheduler at all is said at once; once one has answered, a
    connection it refuses (a replica restarting) is tried again."""
    transport = LosingAnswers(1, before=True)
    made = Client(url, transport=transport, retry_pause=0.01, fail_fast=True)
    with made, pytest.raises(Unreachable, match="cannot reach the scheduler"):
        made.nodes()
    assert transport.methods == []  # not sent again
    transport.lose = 0
    made = Client(url, transport=transport, retry_pause=0.01, fail_fast=True)
    with made:
        made.nodes()  # answered
        transport.lose = 2
        assert made.nodes() == {"n1": made.nodes()["n1"]}
    assert transport.methods == ["GET", "GET", "GET"]

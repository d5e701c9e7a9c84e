"""The client's plans driven by hand, without a socket: what each failure makes a call do
(retrying.py), and how a wait reads the job (ops.watch). Each step a plan yields is checked,
and what a driver would answer is sent back."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import msgspec
import pytest

from scheduler.client import ops
from scheduler.client.errors import NotFound, Unavailable, Unreachable, WaitTimeout
from scheduler.client.retrying import Policy, send
from scheduler.client.steps import (
    Exchange,
    Item,
    Lost,
    NotSent,
    Now,
    PolicyAsk,
    Reply,
    Request,
    Sleep,
)
from scheduler.models.job import Job

POLICY = Policy(tries=4, first_pause=0.5)
OK = Reply(200, {}, b"{}")


def answer(status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> Reply:
    return Reply(status, headers or {}, body)


def drive(
    plan: Generator[Any, Any, Any], outcomes: list[Reply | Exception]
) -> tuple[Any, list[Any]]:
    """Run `plan`, answering each Exchange with the next outcome (a Reply, or a failure
    thrown in): (what it returned, the steps it took but the policy's)."""
    steps: list[Any] = []
    reply: Any = None
    failure: Exception | None = None
    while True:
        try:
            step = plan.throw(failure) if failure else plan.send(reply)
        except StopIteration as stop:
            return stop.value, steps
        reply, failure = None, None
        if isinstance(step, PolicyAsk):
            reply = POLICY
            continue
        steps.append(step)
        if isinstance(step, Exchange):
            outcome = outcomes.pop(0)
            if isinstance(outcome, Exception):
                failure = outcome
            else:
                reply = outcome


REQUEST = Request("GET", "/jobs/job-1")


@pytest.mark.parametrize("repeatable", [True, False])
def test_a_request_that_never_left_is_sent_again_whatever_the_call(repeatable: bool) -> None:
    reply, steps = drive(send(REQUEST, repeatable), [NotSent("at u: refused"), OK])
    assert reply is OK
    assert steps == [Exchange(REQUEST), Sleep(0.5), Exchange(REQUEST)]


def test_a_lost_answer_is_sent_again_only_for_a_repeatable_call() -> None:
    reply, steps = drive(send(REQUEST, True), [Lost("at u: reset"), Lost("at u: reset"), OK])
    assert reply is OK
    assert [s for s in steps if isinstance(s, Sleep)] == [Sleep(0.5), Sleep(1.0)]

    with pytest.raises(Unreachable, match="may have been done"):
        drive(send(REQUEST, False), [Lost("at u: reset"), OK])


def test_a_keys_lost_answer_is_read_again_and_a_change_of_keys_is_never_sent_twice() -> None:
    lost = Lost("at u: reset")
    listed = answer(200, body=b"[]")
    assert drive(ops.named_keys(), [lost, listed])[0] == []
    for change in (ops.add_key("ci", role="submitter"), ops.revoke_key("ci")):
        with pytest.raises(Unreachable, match="may have been done") as raised:
            drive(change, [lost, OK])
        assert raised.value.maybe_done


def test_a_keys_role_is_sent_by_its_name_whether_a_role_or_a_string() -> None:
    from scheduler.client import Role

    for role in (Role.OPERATOR, "operator"):
        made = b'{"name":"ops","role":"operator","created_at":1.0,"created_by":"admin","key":"k"}'
        key, steps = drive(ops.add_key("ops", role), [answer(201, body=made)])
        assert msgspec.json.decode(steps[0].request.json) == {"name": "ops", "role": "operator"}
        assert (key.role, key.key) == (Role.OPERATOR, "k")


SOON = {"retry-after": "1"}


@pytest.mark.parametrize(("status", "headers"), [(502, {}), (503, SOON), (504, {})])
def test_an_unavailable_scheduler_is_asked_again_by_a_repeatable_call(
    status: int, headers: dict[str, str]
) -> None:
    reply, steps = drive(send(REQUEST, True), [answer(status, headers), OK])
    assert reply is OK and len([s for s in steps if isinstance(s, Exchange)]) == 2
    # Not repeatable: the answer is the call's (its reader raises Unavailable).
    reply, steps = drive(send(REQUEST, False), [answer(status, headers), OK])
    assert reply.status == status and len(steps) == 1


def test_a_503_without_retry_after_stands() -> None:
    """No healthy node, too many nodes: nothing a try again soon changes."""
    reply, steps = drive(send(REQUEST, True), [answer(503, body=b"no healthy compute nodes"), OK])
    assert reply.status == 503 and steps == [Exchange(REQUEST)]


def test_retry_after_is_waited_and_capped() -> None:
    _, steps = drive(send(REQUEST, True), [answer(503, {"retry-after": "7"}), OK])
    assert Sleep(7.0) in steps
    _, steps = drive(send(REQUEST, True), [answer(503, {"retry-after": "9999"}), OK])
    assert Sleep(30.0) in steps


def test_the_tries_end_in_unreachable_naming_the_last_failure() -> None:
    with pytest.raises(Unreachable, match="cannot reach the scheduler at u: refused"):
        drive(send(REQUEST, True), [NotSent("at u: refused")] * 4)
    # The last try's 503 is the answer: its reader says Unavailable.
    reply, steps = drive(send(REQUEST, True), [answer(503, SOON)] * 4)
    assert reply.status == 503 and len([s for s in steps if isinstance(s, Exchange)]) == 4


@pytest.mark.parametrize(("status", "kind"), [(404, NotFound), (503, Unavailable)])
def test_an_error_answer_is_its_exception(status: int, kind: type[Exception]) -> None:
    with pytest.raises(kind):
        drive(ops.job("job-1"), [answer(status, SOON, b"job not found\n")] * 4)


def job(status: str) -> Reply:
    record = Job(
        job_id="job-1", node_id="n", command="c", status=status, retry_count=0, created_at="t"
    )
    return answer(200, body=msgspec.json.encode(record))


def run_watch(
    plan: Generator[Any, Any, Any], replies: list[Reply], clock: list[float]
) -> tuple[list[str], list[Any]]:
    """Drive a watch: Now answered from `clock` (its last value once used up)."""
    seen: list[str] = []
    steps: list[Any] = []
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration:
            return seen, steps
        reply = None
        if isinstance(step, PolicyAsk):
            reply = POLICY
        elif isinstance(step, Now):
            reply = clock.pop(0) if len(clock) > 1 else clock[0]
        elif isinstance(step, Item):
            seen.append(step.value.status)
        else:
            steps.append(step)
            if isinstance(step, Exchange):
                reply = replies.pop(0)


def test_a_watch_long_polls_from_the_last_status_seen_until_the_end() -> None:
    seen, steps = run_watch(
        ops.watch("job-1", poll_secs=20), [job("pending"), job("running"), job("done")], [0.0]
    )
    assert seen == ["pending", "running", "done"]
    asked = [s.request.params for s in steps if isinstance(s, Exchange)]
    assert asked == [
        {},
        {"wait": "20", "status_not": "pending"},
        {"wait": "20", "status_not": "running"},
    ]
    # The read of a long-poll may take its wait longer than the client's timeout.
    assert [s.request.wait_secs for s in steps if isinstance(s, Exchange)] == [0.0, 20.0, 20.0]


def test_a_watch_of_a_scheduler_without_long_poll_waits_between_reads() -> None:
    seen, steps = run_watch(
        ops.watch("job-1", poll_secs=2), [job("pending"), job("pending"), job("done")], [0.0]
    )
    assert seen == ["pending", "pending", "done"]
    assert Sleep(2.0) in steps


def test_a_wait_gives_up_at_its_timeout_with_the_last_job_seen() -> None:
    # The clock: the start, then each read's start and end.
    plan = ops.wait("job-1", timeout=15, poll_secs=60)
    with pytest.raises(WaitTimeout) as raised:
        run_watch(plan, [job("pending"), job("pending")], [0.0, 0.0, 1.0, 1.0, 16.0])
    assert raised.value.job.status == "pending"
    assert "after 15 s" in str(raised.value)


def test_a_waits_long_poll_never_outlasts_its_timeout() -> None:
    _, steps = run_watch(
        ops.watch("job-1", timeout=5, poll_secs=60),
        [job("pending"), job("done")],
        [0.0, 0.0, 1.0, 2.0],
    )
    waits = [s.request.wait_secs for s in steps if isinstance(s, Exchange)]
    assert waits == [0.0, 3.0]  # 5 s from the start, at 2 s


def test_a_listing_reads_pages_until_an_empty_one() -> None:
    page = [
        Job(
            job_id=f"job-{n}",
            node_id="n",
            command="c",
            status="done",
            retry_count=0,
            created_at="t",
        )
        for n in (1, 2)
    ]
    replies = [answer(200, body=msgspec.json.encode(page)), answer(200, body=b"[]")]
    seen, steps = [], []
    plan = ops.jobs(status="done", page_size=2)
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration:
            break
        reply = None
        if isinstance(step, PolicyAsk):
            reply = POLICY
        elif isinstance(step, Item):
            seen.append(step.value.job_id)
        else:
            steps.append(step)
            reply = replies.pop(0)
    assert seen == ["job-1", "job-2"]
    assert [s.request.params for s in steps] == [
        {"status": "done", "limit": "2"},
        {"status": "done", "limit": "2", "after": "job-2"},
    ]


def test_a_bulk_submit_goes_in_batches_of_the_apis_limit_each_under_its_own_key() -> None:
    jobs = [{"command": f"echo {n}"} for n in range(2500)]
    made = [
        answer(200, body=msgspec.json.encode({"jobs": [{"job_id": f"job-{n}"} for n in range(k)]}))
        for k in (1000, 1000, 500)
    ]
    entries, steps = drive(ops.submit_many(jobs, idempotency_key="k"), made)
    sent = [s.request for s in steps if isinstance(s, Exchange)]
    assert [r.headers["Idempotency-Key"] for r in sent] == ["k", "k.1", "k.2"]
    assert [len(msgspec.json.decode(r.json or b"")["jobs"]) for r in sent] == [1000, 1000, 500]
    assert len(entries) == 2500


def operations() -> dict[str, Any]:
    """ops.py's operations, and every public plan of the modules that hold them: one left out
    of OPERATIONS would be a method neither client has."""
    import inspect

    from scheduler.client import fleet, jobs, keys, watching

    found = {op.__name__: op for op in ops.OPERATIONS}
    for module in (jobs, watching, fleet, keys):
        for name, fn in vars(module).items():
            plan = inspect.isfunction(fn) and fn.__module__ == module.__name__
            answer = str(inspect.signature(fn).return_annotation) if plan else ""
            if plan and not name.startswith("_") and answer.startswith(("Flow[", "Feed[")):
                assert name in found, f"{module.__name__}.{name} is not in ops.OPERATIONS"
    return found


def test_both_clients_bind_every_operation_with_its_signature_and_doc() -> None:
    import inspect

    from scheduler.client import AsyncClient, Client

    found = operations()
    assert len(found) >= 20
    for name, op in found.items():
        for client in (Client, AsyncClient):
            method = getattr(client, name, None)
            assert method is not None, f"{client.__name__} lacks {name}"
            assert method.__doc__ == op.__doc__
            bound = list(inspect.signature(method).parameters)
            assert bound == ["self", *inspect.signature(op).parameters]


def test_the_clients_page_lists_every_operation() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "CLIENT.md").read_text()
    missing = [op.__name__ for op in ops.OPERATIONS if f"`{op.__name__}(" not in page]
    assert not missing, f"docs/CLIENT.md's table lacks {missing}"


def test_a_policy_that_fails_fast_does_not_send_again_what_never_left() -> None:
    fast = Policy(tries=4, first_pause=0.5, retry_not_sent=False)
    plan = send(REQUEST, True)
    assert isinstance(next(plan), PolicyAsk)
    assert plan.send(fast) == Exchange(REQUEST)
    with pytest.raises(Unreachable, match="cannot reach the scheduler at u"):
        plan.throw(NotSent("at u: refused"))
    # A lost answer is still sent again: the scheduler was there.
    plan = send(REQUEST, True)
    next(plan)
    plan.send(fast)
    assert plan.throw(Lost("at u: reset")) == Sleep(0.5)

"""workers/queues.py's ClaimingQueue: a dequeued job is always in some list (its queue's
intermediate list until its start is recorded), so a worker killed right after taking it, or
a Redis that died before answering, cannot make it vanish (issue #11, item 5 found this)."""

from __future__ import annotations

import pytest
import redis
from rq.exceptions import DequeueTimeout

from scheduler.config import Settings
from workers import queues
from workers.worker import build_worker


def test_a_dequeued_job_waits_in_its_intermediate_list(
    settings: Settings, rclient: redis.Redis
) -> None:
    periodic = queues.queue(rclient, settings, queues.PERIODIC)
    events = queues.queue(rclient, settings, queues.EVENTS)
    late = events.enqueue("builtins.len", args=("ab",), job_id="e1")
    first = periodic.enqueue("builtins.len", args=("abc",), job_id="p1")

    job, queue = queues.ClaimingQueue.dequeue_any([periodic, events], 1, connection=rclient)

    assert (job.id, queue.name) == (first.id, periodic.name)  # periodic first
    assert periodic.intermediate_queue.get_job_ids() == ["p1"]  # not lost if we die now
    assert periodic.count == 0 and events.get_job_ids() == [late.id]


def test_empty_queues_time_out_or_answer_none(settings: Settings, rclient: redis.Redis) -> None:
    both = queues.queues(rclient, settings)
    assert queues.ClaimingQueue.dequeue_any(both, None, connection=rclient) is None
    with pytest.raises(DequeueTimeout):
        queues.ClaimingQueue.dequeue_any(both, 1, connection=rclient)


def test_a_started_job_leaves_the_intermediate_list(
    settings: Settings, rclient: redis.Redis
) -> None:
    periodic = queues.queue(rclient, settings, queues.PERIODIC)
    periodic.enqueue("builtins.len", args=("abc",), job_id="p2")
    worker = build_worker(settings)
    worker.work(burst=True)
    assert periodic.fetch_job("p2").return_value() == 3  # type: ignore[union-attr]
    assert periodic.intermediate_queue.get_job_ids() == []

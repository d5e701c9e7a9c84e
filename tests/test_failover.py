"""Issue 14, item 3: a Sentinel failover under load, with real processes.

A primary, its replica and three sentinels (redis-server and redis-sentinel, started here),
two API processes, two workers and three simulated agents (test_faults' Load), all with
REDIS_URL=redis+sentinel://... and REDIS_MIN_REPLICAS_ACKED=1. While jobs are submitted,
claimed and finished, the primary is SIGKILLed, Sentinel promotes the replica, and the old
primary comes back empty (as a replica of the new one). Then: every job whose submission got
201 exists, none ran twice, the API answered 503 (never 500) in the gap and serves again
within seconds, and the workers carry on (every job's event published, a sweep run after the
failover).

One replica, N=1: every replica holds every acknowledged change, so whichever Sentinel
promotes has it. With two replicas and N=1 this test lost an acknowledged job in one of
about eight runs: Sentinel promotes the replica it believes most up to date, not necessarily
one that acknowledged (Redis' WAIT documentation warns of it).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scheduler.config import Settings
from scheduler.store.connection.blocking import sync_client
from scheduler.store.connection.notify import Notifier
from scheduler.store.keys import Keys
from tests.fakes import FakeSNS, eventually
from tests.processes import scheduler_env
from tests.redis_server import SentinelGroup, free_port, sentinel_group
from tests.test_faults import ENV, Fleet, Load, start_product, wait_all_done

pytestmark = pytest.mark.faults

RECOVERY_LIMIT_SECS = 15.0


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    with sentinel_group(replicas=1) as started:
        yield started


def test_a_failover_under_load_loses_no_acknowledged_job_and_runs_none_twice(
    group: SentinelGroup, sns: FakeSNS, prefix: str, tmp_path: Path
) -> None:
    env = scheduler_env(
        group.url,
        prefix,
        **ENV,
        SNS_URL=sns.url,
        SCHEDULER_DB=str(tmp_path / "snap.db"),
        REDIS_MIN_REPLICAS_ACKED="1",
    )
    settings = Settings.from_env(env)
    keys = Keys(prefix)
    r = sync_client(settings)  # follows the failover too
    fleet = Fleet(env, tmp_path)
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    load = Load(urls)
    try:
        start_product(fleet, urls, load)

        time.sleep(2.0)
        old = group.primary_port()
        group.kill(old)
        killed = time.monotonic()
        eventually(lambda: group.promoted(old), timeout=30, interval=0.1)
        promoted = time.monotonic()
        # The old primary comes back empty, and becomes a replica of the new one. Until it
        # has synced, no change can be acknowledged: 503s, as N=1 asks.
        group.restart(old)

        def submitted_after_a_refusal() -> bool:
            refused = [t for t, _, c in load.answers if t > killed and c >= 500]
            return any(
                refused and t > refused[0] and m == "POST" and c == 201 for t, m, c in load.answers
            )

        eventually(submitted_after_a_refusal, timeout=RECOVERY_LIMIT_SECS + 15)
        time.sleep(2.0)  # more load on the new primary
        load.stop_submitting.set()
        acknowledged = set(load.acknowledged)

        jobs = wait_all_done(r, keys, load)

        def published() -> bool:
            return {e["job_id"] for e in sns.events()} >= set(jobs)

        eventually(published, timeout=90)  # a publish cut off at its dequeue: rq's cleanup
        sweeps_after = [float(raw.split()[1]) for raw in r.lrange(keys.runs("sweep"), 0, -1)]
        alive = fleet.alive()
    finally:
        load.join()
        fleet.stop_all()

    answers = load.answers
    codes = Counter(code for _, _, code in answers)
    gap = [t for t, _, code in answers if t > killed and code >= 500]
    # Back: the first read answered, and the first change acknowledged, after the promotion.
    reads_back = min(t for t, m, c in answers if t > promoted and m == "GET" and c == 200)
    first_back = min(t for t, m, c in answers if t > promoted and m == "POST" and c == 201)
    # Sentinel really failed over (group.promoted saw another process named and serving as
    # the primary), in time. Not "the primary is still another process now": on this 2-core
    # machine under the test's load the sentinels may, rarely, find the new primary silent for
    # down-after-milliseconds and fail over again, back to the old one, by then a synced
    # replica; what this test holds (nothing acknowledged lost, nothing run twice) holds then.
    assert promoted - killed < RECOVERY_LIMIT_SECS
    # 0 acknowledged jobs lost: each exists, is done, and is the job that was acknowledged
    # (an id can be given twice: below).
    assert acknowledged <= set(jobs)
    assert len(acknowledged) > 50
    for job_id, command, at in load.created:
        assert json.loads(jobs[job_id])["command"] == command, (
            f"{job_id} acknowledged {at - killed:.2f} s after the kill (promoted after "
            f"{promoted - killed:.2f} s) is another job now: "
            f"{[(c, round(t - killed, 2)) for i, c, t in load.created if i == job_id]}"
        )
    # 0 jobs run twice: each claimed (200) once.
    assert set(load.runs) == set(jobs) and set(load.runs.values()) == {1}
    # The one refusal allowed: a job the old primary held but no replica did yet (its
    # submission was still waiting for WAIT) can be seen by a poll, which reads, and then
    # die with the primary: its claim is a 404, and its id is given again on the new
    # primary. Its submission never got a 201 (or the 201 came after the refusal, for the
    # new job of that id).
    for (job_id, code, text), at in zip(load.refused, load.refused_at, strict=True):
        assert (code, text) == (404, "job not found\n"), (job_id, code, text)
        assert at > killed
        assert all(t > at for i, _, t in load.created if i == job_id), job_id
    # In the gap: 503, never 500; and the API serves again within seconds.
    assert codes[500] == 0 and set(codes) <= {200, 201, 503}, codes
    assert gap, "the API never noticed the primary was gone"
    assert first_back - killed < RECOVERY_LIMIT_SECS
    # The workers carried on: every job's event published, a sweep ran after the failover.
    assert {e["job_id"] for e in sns.events()} == set(jobs)
    assert any(at > time.time() - (time.monotonic() - promoted) for at in sweeps_after)
    assert alive == dict.fromkeys(alive, True)
    print(
        f"MEASURED failover: promoted after {promoted - killed:.1f} s, API reads back after "
        f"{reads_back - killed:.1f} s, writes after {first_back - killed:.1f} s, "
        f"503s {len(gap)} (first {min(gap) - killed:.2f} s, last {max(gap) - killed:.1f} s "
        f"after the kill), jobs {len(jobs)}, acknowledged {len(acknowledged)}, "
        f"lost unacknowledged jobs polled {len(load.refused)}"
    )


def test_long_poll_wake_ups_follow_the_failover(group: SentinelGroup) -> None:
    """The notifier's subscriber connection dies with the primary: every waiting request is
    woken (to check once more and answer), and the next wait subscribes on the new primary
    and hears what is published there."""
    channel = "sched-test:wake:node:n1"

    async def scenario() -> None:
        notifier = Notifier(group.url)
        async with notifier.watch(channel) as before:
            old = group.primary_port()
            group.kill(old)
            await before.wait(10)
            assert before.event.is_set() and before.lost
        promoted = await asyncio.to_thread(eventually, lambda: group.primary_port() != old, 30, 0.1)
        assert promoted
        new = redis.Redis(port=group.primary_port())

        async def subscribed() -> bool:
            try:
                async with notifier.watch(channel) as after:
                    new.publish(channel, "")
                    await after.wait(5)
                    return after.event.is_set() and not after.lost
            except redis.ConnectionError:  # the sentinels still name the dead primary
                await asyncio.sleep(0.2)
                return False

        deadline = time.monotonic() + RECOVERY_LIMIT_SECS
        while not await subscribed():
            assert time.monotonic() < deadline, "no wake-up on the new primary"
        await notifier.aclose()

    asyncio.run(scenario())

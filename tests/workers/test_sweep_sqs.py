"""The timeout sweep and SQS ingestion tasks, run in-process against the real redis-server and
a real HTTP fake of SQS (tests/fakes.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from starlette.testclient import TestClient

from scheduler.config import ConfigError, Settings
from scheduler.models.job import Job, job_decoder
from scheduler.store.scripts import upkeep
from scheduler.store.scripts.retry import RetryPolicy
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import (
    ClientFactory,
    CtxFactory,
    SettingsFactory,
    assert_json,
    register,
    report,
    submit,
)
from tests.fakes import FakeSQS, ending_number, eventually
from workers import tasks
from workers.context import Context
from workers.ingest import Message, dedup_key


@pytest.fixture
def ctx_overrides() -> dict[str, Any]:
    return {"max_jobs_per_node": 100}


@pytest.fixture
def sqs() -> Iterator[FakeSQS]:
    with FakeSQS(visibility_secs=0.2) as fake:
        yield fake


def api_for(make_client: ClientFactory, ctx: Context, *nodes: str) -> TestClient:
    api = make_client(ctx.settings)
    register(api, *nodes)
    return api


def stats(ctx: Context) -> dict[str, int]:
    raw = cast(dict[bytes, bytes], ctx.redis.hgetall(ctx.keys.stats))
    return {str(k, "utf-8"): int(v) for k, v in raw.items()}


def all_jobs(api: TestClient) -> list[Job]:
    return [job_decoder.decode(json.dumps(j)) for j in assert_json(api.get("/jobs"))]


def outbox(ctx: Context) -> list[str]:
    return [str(e, "utf-8") for e in cast(list[bytes], ctx.redis.lrange(ctx.keys.outbox, 0, -1))]


# The timeout sweep (CONTRACT 2.8, with 8.3/8.4 fixed and a `failed` event).


def test_sweep_fails_expired_run_jobs_only(
    make_ctx: CtxFactory, make_client: ClientFactory
) -> None:
    ctx = make_ctx(job_timeout_secs=1, max_job_retries=1)
    api = api_for(make_client, ctx, "n1")
    expired = submit(api, command="sleep 100")
    service = submit(api, command="serve", job_type="service", port=8080)
    pending = submit(api, command="waits")
    for job in (expired, service):
        assert_json(report(api, job["job_id"], "running"))
    time.sleep(1.2)  # past JOB_TIMEOUT_SECS for the two started above
    fresh = submit(api, command="just started")
    assert_json(report(api, fresh["job_id"], "running"))

    assert tasks.sweep(period=1) == 1

    failed = assert_json(api.get(f"/jobs/{expired['job_id']}"))
    assert failed["status"] == "failed"
    assert failed["exit_code"] == -1
    assert failed["stderr"] == "job timed out"
    assert failed["retry_count"] == 0  # a timeout never retries, even with retries left
    assert "finished_at" in failed
    for job, status in ((service, "running"), (pending, "pending"), (fresh, "running")):
        assert assert_json(api.get(f"/jobs/{job['job_id']}"))["status"] == status
    number = ending_number(ctx.redis, ctx.keys, expired["job_id"])
    assert outbox(ctx) == [f'{number} {{"job_id":"{expired["job_id"]}","status":"failed"}}']
    assert stats(ctx)["timeouts"] == 1
    runs = cast(list[bytes], ctx.redis.lrange(ctx.keys.runs("sweep"), 0, -1))
    assert runs[0].startswith(b"1 ")

    # The agent's late report is refused: the timeout is final.
    late = report(api, expired["job_id"], "done", exit_code=0, stdout="late")
    assert late.status_code == 409
    assert late.text == "job already finished\n"
    assert tasks.sweep(period=2) == 0  # nothing twice
    assert len(outbox(ctx)) == 1


def test_sweep_reads_only_the_expired_entries(
    make_ctx: CtxFactory, make_client: ClientFactory
) -> None:
    ctx = make_ctx(job_timeout_secs=1)
    api = api_for(make_client, ctx, "n1", "n2")
    old = [submit(api, command=f"old {i}")["job_id"] for i in range(3)]
    for job_id in old:
        assert_json(report(api, job_id, "running"))
    # The sweep runs at a `now` of the test's: 1 s after a moment between the old claims and
    # the new ones (the pause only keeps the two apart), so however long the 40 take, only
    # the old ones have run past their timeout by then.
    between = time.time()
    time.sleep(0.05)
    for i in range(40):
        assert_json(report(api, submit(api, command=f"new {i}")["job_id"], "running"))

    policy, ttl = RetryPolicy.of(ctx.settings), ctx.settings.node_ttl_secs
    swept = ctx.store.run(upkeep.sweep_timeouts(between + 1, 1, 500, policy, node_ttl=ttl))

    assert swept.read == 3  # not 43: the cost follows the expired jobs, not all jobs
    assert sorted(swept.ids) == sorted(old)


# SQS ingestion (CONTRACT 2.9, with 8.9, 8.10 and 8.12 fixed).


def test_ingest_creates_jobs_like_post_jobs_and_acks(
    make_ctx: CtxFactory,
    make_client: ClientFactory,
    sqs: FakeSQS,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = make_ctx(sqs_url=sqs.url)
    api = api_for(make_client, ctx, "n1", "n2")
    sqs.send(json.dumps({"command": "echo one"}))
    # Go's leniency, as the original: keys fold case, trailing data and unknown keys
    # ignored (POST /jobs refuses an unknown key; a message's producer is not ours to
    # correct, and dropping its message would lose the job).
    sqs.send('{"Command":"echo two","ENV_VARS":{"A":"1"},"job_type":"run","from":"x"} trail')
    sqs.send(json.dumps({"deploy_url": "http://store/app.zip", "job_type": "service", "port": 80}))

    counts = tasks.ingest_sqs(period=7)

    assert counts == {"sqs_received": 3, "sqs_created": 3}
    assert "sqs: unknown field(s) from in a message ignored" in caplog.text
    jobs = all_jobs(api)
    assert [j.command for j in jobs] == ["echo one", "echo two", ""]
    assert jobs[1].env_vars == {"A": "1"}
    deploy = (jobs[2].deploy_url, jobs[2].job_type, jobs[2].port)
    assert deploy == ("http://store/app.zip", "service", 80)
    assert {j.node_id for j in jobs} == {"n1", "n2"}  # round robin, as POST /jobs
    assert all(j.status == "pending" for j in jobs)
    assert sqs.log.acks == ["msg-1", "msg-2", "msg-3"]
    assert sqs.remaining() == 0
    runs = cast(list[bytes], ctx.redis.lrange(ctx.keys.runs("sqs"), 0, -1))
    assert runs[0].startswith(b"7 ")


def test_a_batch_of_messages_is_made_in_one_round_trip(
    make_ctx: CtxFactory,
    make_client: ClientFactory,
    sqs: FakeSQS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The messages of a poll are made together (ops.jobs.create_many, as POST /jobs/batch):
    one pipeline for their creates, each still acked, dropped or left alone."""
    ctx = make_ctx(sqs_url=sqs.url)
    api = api_for(make_client, ctx, "n1", "n2")
    sent = [
        sqs.send(json.dumps({"command": "one"})),
        sqs.send("not json"),
        sqs.send(json.dumps({"command": "x", "after": ["job-404"]})),
        sqs.send(json.dumps({"command": "two"})),
    ]
    pipelines: list[int] = []
    piped = SyncJobStore._piped

    def counted(self: SyncJobStore, steps: Any) -> list[Any]:
        pipelines.append(len(steps))
        return piped(self, steps)

    monkeypatch.setattr(SyncJobStore, "_piped", counted)
    counts = tasks.ingest_sqs(period=1)

    assert counts == {"sqs_received": 4, "sqs_created": 2, "sqs_dropped": 2}
    assert [j.command for j in all_jobs(api)] == ["one", "two"]
    assert 3 in pipelines  # the three bodies that decoded, made together
    assert sorted(sqs.log.acks) == sorted(sent)


BAD_BODIES = [
    ("not json", "failed to decode job: body: not valid JSON (invalid character at byte 4)"),
    ("", "failed to decode job: body: empty (send a JSON object)"),
    ('{"command": 5}', "failed to decode job: command: must be a string, got an integer"),
    ('{"port": "80", "command": "x"}', "failed to decode job: port: must be an integer, got a"),
    ("null", "command or deploy_url is required"),
    ('{"instance_id": "i-1"}', "command or deploy_url is required"),
    ('{"command": "x", "job_type": "cron"}', "invalid job_type"),
    ('{"command": "x", "env_vars": {"1BAD": "v"}}', "invalid env_vars name"),
    ('{"command": "x", "port": 70000}', "invalid port"),
    ('{"command": "x", "instance_id": "../../nodes"}', "invalid instance_id"),
    ('{"command": "rm\\u0000 -rf"}', "invalid command: must not contain NUL bytes"),
    ('{"command": "x", "env_vars": {"K": "v\\u0000"}}', "invalid env_vars value of 'K'"),
    ({"command": "an object, not a string"}, "body is not a JSON string"),
    (None, "body is not a JSON string"),
    (
        '{"command": "x", "env_vars": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "failed to decode job: body: JSON nested too deeply",
    ),
]


def test_bad_messages_are_acked_dropped_logged_and_counted(
    make_ctx: CtxFactory,
    make_client: ClientFactory,
    sqs: FakeSQS,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = make_ctx(sqs_url=sqs.url)
    api = api_for(make_client, ctx, "n1")
    ids = [sqs.send(body) for body, _ in BAD_BODIES]
    sqs.send(json.dumps({"command": "good"}))

    counts = tasks.ingest_sqs(period=1)

    assert counts == {"sqs_received": len(ids) + 1, "sqs_dropped": len(ids), "sqs_created": 1}
    assert [j.command for j in all_jobs(api)] == ["good"]
    assert sqs.log.acks[:-1] == ids
    assert sqs.remaining() == 0
    assert stats(ctx)["sqs_dropped"] == len(ids)
    logged = [r.getMessage() for r in caplog.records if r.name == "workers.sqs"]
    for message_id, (_, reason) in zip(ids, BAD_BODIES, strict=True):
        assert any(message_id in line and reason in line for line in logged), reason


@pytest.mark.parametrize("reply", [b"null\n", b"{}", b'{"id":""}', b'{"body":"{}"}', b"[]"])
def test_empty_replies_mean_an_empty_queue(
    make_ctx: CtxFactory, sqs: FakeSQS, reply: bytes
) -> None:
    ctx = make_ctx(sqs_url=sqs.url)
    sqs.empty_reply = reply
    assert tasks.ingest_sqs(period=1) == {}
    assert sqs.log.receives == 1
    assert sqs.log.acks == []
    assert ctx.redis.get(ctx.keys.job_seq) is None


def test_redelivery_after_a_lost_ack_makes_no_second_job(
    make_ctx: CtxFactory, make_client: ClientFactory, sqs: FakeSQS
) -> None:
    ctx = make_ctx(sqs_url=sqs.url)
    api = api_for(make_client, ctx, "n1")
    sqs.send(json.dumps({"command": "only once"}))
    sqs.lose_acks = 1

    assert tasks.ingest_sqs(period=1) == {"sqs_received": 1, "sqs_created": 1, "sqs_ack_failed": 1}
    assert sqs.remaining() == 1  # still there: the queue will redeliver it
    redelivered = eventually(lambda: tasks.ingest_sqs(period=2).get("sqs_received"))

    assert redelivered == 1
    assert sqs.log.deliveries == ["msg-1", "msg-1"]
    assert [j.command for j in all_jobs(api)] == ["only once"]
    assert sqs.remaining() == 0
    assert stats(ctx)["sqs_duplicates"] == 1


def test_a_job_created_before_a_crash_is_not_created_again(
    make_ctx: CtxFactory, make_client: ClientFactory, sqs: FakeSQS
) -> None:
    """The worker died after the create script and before the ack: the key is in Redis."""
    ctx = make_ctx(sqs_url=sqs.url)
    api = api_for(make_client, ctx, "n1")
    body = json.dumps({"command": "created, then crash"})
    message_id = sqs.send(body)
    first = tasks.ingest_sqs(period=1)
    assert first["sqs_created"] == 1
    sqs.messages[0].deleted = False  # as if the ack had never been sent

    again = eventually(lambda: tasks.ingest_sqs(period=2))

    assert again == {"sqs_received": 1, "sqs_duplicates": 1}
    assert len(all_jobs(api)) == 1
    assert sqs.log.acks == [message_id, message_id]


def test_ids_reused_after_an_sqs_wipe_are_new_messages(
    make_ctx: CtxFactory, make_client: ClientFactory, sqs: FakeSQS
) -> None:
    ctx = make_ctx(sqs_url=sqs.url)
    api = api_for(make_client, ctx, "n1")
    sqs.send(json.dumps({"command": "before the wipe"}))
    tasks.ingest_sqs(period=1)
    sqs.wipe()
    assert sqs.send(json.dumps({"command": "after the wipe"})) == "msg-1"

    assert tasks.ingest_sqs(period=2) == {"sqs_received": 1, "sqs_created": 1}
    assert [j.command for j in all_jobs(api)] == ["before the wipe", "after the wipe"]


def test_dedup_key_combines_the_id_and_the_body() -> None:
    a = dedup_key(Message("msg-1", '{"command":"a"}'))
    assert a.startswith("msg-1:")
    assert a == dedup_key(Message("msg-1", '{"command":"a"}'))
    assert a != dedup_key(Message("msg-1", '{"command":"b"}'))
    assert a != dedup_key(Message("msg-2", '{"command":"a"}'))
    odd = dedup_key(Message("id with spaces/and:colons", "x"))
    assert len(odd) == 32 and " " not in odd


def test_no_healthy_node_leaves_the_message_for_redelivery(
    make_ctx: CtxFactory, make_client: ClientFactory, sqs: FakeSQS
) -> None:
    ctx = make_ctx(sqs_url=sqs.url)
    api = make_client(ctx.settings)  # no node registered
    sqs.send(json.dumps({"command": "waits for a node"}))
    sqs.send(json.dumps({"command": "so does this one"}))

    counts = tasks.ingest_sqs(period=1)

    # The batch's failure ends the poll: without a node no message can be placed.
    assert counts == {"sqs_received": 2, "sqs_unplaced": 2}
    assert sqs.log.acks == []
    assert all_jobs(api) == []
    register(api, "n1")
    eventually(lambda: tasks.ingest_sqs(period=2).get("sqs_created") == 2 or sqs.remaining() == 0)
    assert sorted(j.command for j in all_jobs(api)) == ["so does this one", "waits for a node"]
    assert stats(ctx)["sqs_unplaced"] == 2


@pytest.mark.parametrize("outage", ["down", "500", "hung"])
def test_sqs_outage_is_logged_and_retried_next_poll(
    make_ctx: CtxFactory,
    make_client: ClientFactory,
    sqs: FakeSQS,
    outage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = make_ctx(sqs_url=sqs.url, http_timeout_secs=0.3)
    api = api_for(make_client, ctx, "n1")
    sqs.send(json.dumps({"command": "survives the outage"}))
    if outage == "down":
        sqs.stop()
    elif outage == "500":
        sqs.failing = 500
    else:
        sqs.delay_secs = 2.0  # longer than the client's timeout

    assert tasks.ingest_sqs(period=1) == {"sqs_errors": 1}
    assert any("trying again at the next poll" in r.getMessage() for r in caplog.records)

    if outage == "down":
        sqs.start()
    sqs.failing, sqs.delay_secs = None, 0.0
    eventually(lambda: tasks.ingest_sqs(period=2).get("sqs_created"))
    assert [j.command for j in all_jobs(api)] == ["survives the outage"]


def test_worker_settings_are_validated(make_settings: SettingsFactory) -> None:
    for env, value in [
        ("SQS_DEDUP_TTL_SECS", "5"),
        ("SNS_RETRY_MAX", "0"),
        ("SNS_RETRY_CAP_SECS", "0"),
        ("WORKER_ABANDON_GRACE_SECS", "0"),
        ("OUTBOX_FLUSH_SECS", "x"),
    ]:
        with pytest.raises(ConfigError, match=env):
            Settings.from_env({env: value})
    assert Settings.from_env({}).sqs_dedup_ttl_secs == 7 * 86400

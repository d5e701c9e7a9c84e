"""Job records keep the original's bytes whichever code wrote them last: fields in the Go
struct's order (CONTRACT 2.2), empty optional ones omitted, env_vars keys sorted, "/" not
escaped. Creation encodes in Python (msgspec); transitions, the timeout sweep and the requeue
of lost nodes re-encode inside Lua (encode.lua `encode`)."""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.job import JOB_FIELDS, job_decoder, record_encoder
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report, submit
from tests.records import stored_record

# The original's Job struct, field by field (CONTRACT 2.2): written out here, not read from
# models.job.Job, so a reordering of the model fails this test.
GO_ORDER = [
    "job_id",
    "node_id",
    "instance_id",
    "command",
    "deploy_url",
    "env_vars",
    "job_type",
    "port",
    "status",
    "retry_count",
    "exit_code",
    "stdout",
    "stderr",
    "created_at",
    "running_at",
    "finished_at",
]
# Fields of ours, after the original's, in Job's order.
OURS = [f.name for f in JOB_FIELDS if f.name not in GO_ORDER]

ENV = {"ZED": "1", "ALPHA": "a/b", "MIDDLE": "é"}


def stored(rclient: redis.Redis, settings: Settings, job_id: str) -> bytes:
    raw = stored_record(rclient, Keys(settings.redis_prefix), job_id)
    assert isinstance(raw, bytes)
    return raw


def assert_go_order(names: list[str]) -> None:
    """The original's fields in its order, then ours (OURS: an older Go field cannot move
    behind one of ours)."""
    go = [name for name in names if name not in OURS]
    assert go == [name for name in GO_ORDER if name in names], names
    assert names == go + [name for name in OURS if name in names], names


def assert_go_bytes(raw: bytes) -> dict[str, Any]:
    """`raw` is what Go's encoder would write for the job it holds."""
    pairs = json.loads(raw, object_pairs_hook=list)
    names = [name for name, _ in pairs]
    assert_go_order(names)
    job = dict(pairs)
    if "env_vars" in job:
        assert [k for k, _ in job["env_vars"]] == sorted(k for k, _ in job["env_vars"])
    assert b"\\/" not in raw
    # msgspec in deterministic order is the Python side's encoder of the same rule.
    assert raw == record_encoder.encode(job_decoder.decode(raw))
    decoded: dict[str, Any] = json.loads(raw)
    return decoded


def test_every_transition_writes_the_go_field_order(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings(max_job_retries=1)
    api: TestClient = make_client(settings)
    register(api, "n1")
    job = submit(api, command="cat /etc/hosts", env_vars=ENV, job_type="run", port=8080)
    job_id = job["job_id"]
    assert_go_bytes(stored(rclient, settings, job_id))

    steps: list[tuple[str, dict[str, Any]]] = [
        ("running", {}),
        ("failed", {"exit_code": 2, "stdout": "a/b", "stderr": "x</y>"}),  # the retry
        ("running", {}),
        ("done", {"exit_code": 0, "stdout": "out/put ünï"}),
    ]
    for status, fields in steps:
        response = report(api, job_id, status, **fields)
        assert response.status_code == 200, response.text
        raw = stored(rclient, settings, job_id)
        assert response.content == raw + b"\n"
        assert_go_bytes(raw)
    final = assert_go_bytes(stored(rclient, settings, job_id))
    assert final["exit_code"] == 0
    assert final["env_vars"] == ENV
    assert final["stdout"] == "out/put ünï"
    assert final["retry_count"] == 1


def test_the_timeout_sweep_writes_the_go_field_order(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings(job_timeout_secs=1)
    api = make_client(settings)
    register(api, "n1")
    job_id = submit(api, command="sleep 9", env_vars=ENV)["job_id"]
    assert report(api, job_id, "running").status_code == 200
    store = SyncJobStore(rclient, settings)
    assert store.sweep_timeouts(time.time() + 10) == [job_id]
    job = assert_go_bytes(stored(rclient, settings, job_id))
    assert (job["status"], job["exit_code"], job["stderr"]) == ("failed", -1, "job timed out")


def test_the_requeue_of_a_lost_node_writes_the_go_field_order(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings(node_ttl_secs=1, node_lost_secs=2)
    api = make_client(settings)
    register(api, "n1")
    job_id = submit(api, command="echo /", env_vars=ENV)["job_id"]
    register(api, "n2")
    # n1 was last heard from now; n2 heartbeats later, so only n1 is lost.
    store = SyncJobStore(rclient, settings)
    later = time.time() + 60
    rclient.zadd(Keys(settings.redis_prefix).nodes_compute, {"n2": later})
    moved = store.requeue_lost(later)
    assert [m.job_id for m in moved] == [job_id]
    job = assert_go_bytes(stored(rclient, settings, job_id))
    assert job["node_id"] == "n2"


def test_fields_beyond_the_model_follow_sorted_and_survive(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    api = make_client(settings)
    register(api, "n1")
    job_id = submit(api, command="x")["job_id"]
    key = Keys(settings.redis_prefix).job(job_id)
    raw = stored(rclient, settings, job_id)
    rclient.set(key, raw[:-1] + b',"zz_new":"z","aa_new":1}')
    assert report(api, job_id, "running").status_code == 200
    after = stored(rclient, settings, job_id)
    names = [name for name, _ in json.loads(after, object_pairs_hook=list)]
    assert names[-2:] == ["aa_new", "zz_new"]
    assert_go_order(names[:-2])


def test_values_that_need_escaping_round_trip(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    api = make_client(settings)
    register(api, "n1")
    tricky = 'back\\slash "quoted" tab\t line\n ctrl\x01 /path é 😀'
    job_id = submit(api, command=tricky, env_vars={"Q": tricky})["job_id"]
    assert report(api, job_id, "running").status_code == 200
    # Each on its own too: a value with one character to escape and no other.
    slash, quote = "only\\a backslash", 'only "a quote'
    done = report(api, job_id, "done", exit_code=-2147483648, stdout=slash, stderr=quote)
    assert done.status_code == 200, done.text
    job = assert_go_bytes(stored(rclient, settings, job_id))
    assert (job["command"], job["stdout"], job["stderr"]) == (tricky, slash, quote)
    assert job["env_vars"] == {"Q": tricky}
    assert job["exit_code"] == -2147483648

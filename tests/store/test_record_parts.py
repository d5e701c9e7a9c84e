"""A job's record in parts in a real Redis (models/record.py): the scripts of a job's life
never read its spec or outputs whole, so a transition costs the same for any job; every
reader gets the record as before; a whole record of an earlier version is read as it is and
split once at start (SyncJobStore.split_records)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from scheduler.store.keys import Keys
from scheduler.store.records import job_parts
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report, submit
from tests.records import stored_job, stored_record

BIG_ENV = {f"VAR_{i}": "v" * 100 for i in range(2000)}  # ~220 KB
BIG_OUT = "é" * 200_000  # 400 KB of two-byte characters
# What a script may do with a part: write it, drop it, or read its length or its tail.
PART_WRITES = {"SET", "DEL", "STRLEN", "GETRANGE"}


def script_commands(r: redis.Redis, act: Callable[[], Any]) -> list[list[str]]:
    """The commands scripts ran (MONITOR's "lua" entries) while `act` ran."""
    marker = "end-of-act"
    seen: list[list[str]] = []
    with r.monitor() as monitor:
        ready = threading.Event()

        def listen() -> None:
            ready.set()
            for entry in monitor.listen():
                words = str(entry["command"]).split()
                if marker in words:
                    return
                if entry.get("client_type") == "lua":
                    seen.append(words)

        thread = threading.Thread(target=listen)
        thread.start()
        ready.wait()
        act()
        r.echo(marker)
        thread.join(timeout=60)
    return seen


def touching(commands: list[list[str]], keys: list[str]) -> Iterator[list[str]]:
    for words in commands:
        if any(key in words[1:] for key in keys):
            yield words


@pytest.fixture
def big_job(make_client: ClientFactory, make_settings: SettingsFactory) -> Any:
    settings = make_settings()
    api = make_client(settings)
    register(api, "n1")
    job = submit(api, command="x" * 1000, env_vars=BIG_ENV, max_retries=0)
    return api, settings, job["job_id"]


def test_a_jobs_life_never_reads_its_large_parts_whole(big_job: Any, rclient: redis.Redis) -> None:
    api, settings, job_id = big_job
    keys = Keys(settings.redis_prefix)

    def life() -> None:
        assert report(api, job_id, "running").status_code == 200
        done = report(api, job_id, "failed", exit_code=1, stdout=BIG_OUT, stderr=BIG_OUT)
        assert done.status_code == 200
        assert api.post(f"/jobs/{job_id}/retry").status_code == 200
        assert report(api, job_id, "running").status_code == 200
        assert api.delete(f"/jobs/{job_id}").status_code == 200

    commands = script_commands(rclient, life)
    parts = job_parts(keys, job_id)[1:]
    assert commands, "MONITOR saw no script command"
    touched = list(touching(commands, parts))
    assert touched, "the scripts wrote no part"
    assert {words[0].strip('"').upper() for words in touched} <= PART_WRITES, touched
    # The head the scripts decode stays small, whatever the job holds.
    assert len(rclient.get(keys.job(job_id)) or b"") < 1000


def test_every_reader_gets_the_whole_record(big_job: Any, rclient: redis.Redis) -> None:
    api, settings, job_id = big_job
    report(api, job_id, "running")
    patched = report(api, job_id, "done", exit_code=0, stdout=BIG_OUT, stderr="e")
    keys = Keys(settings.redis_prefix)
    whole = stored_record(rclient, keys, job_id)
    assert whole is not None
    job = json.loads(whole)
    assert (job["env_vars"], job["stdout"], job["stderr"]) == (BIG_ENV, BIG_OUT, "e")
    assert patched.content.rstrip(b"\n") == whole
    assert api.get(f"/jobs/{job_id}").content.rstrip(b"\n") == whole
    assert api.get("/jobs", params={"node_id": "n1"}).json() == [job]
    assert rclient.get(keys.job_output(job_id, "stdout")) == BIG_OUT.encode()
    attempt = api.get(f"/jobs/{job_id}/attempts").json()[-1]
    assert BIG_OUT.endswith(attempt["stdout"]) and attempt["stdout"]  # a tail, whole characters


def test_the_poll_answers_the_whole_job(big_job: Any) -> None:
    api, _, job_id = big_job
    polled = api.get("/jobs", params={"node_id": "n1", "status": "pending"}).json()
    assert [(j["job_id"], j["env_vars"]) for j in polled] == [(job_id, BIG_ENV)]


def test_a_retry_clears_both_outputs_and_a_new_attempt_clears_stdout(
    big_job: Any, rclient: redis.Redis
) -> None:
    api, settings, job_id = big_job
    keys = Keys(settings.redis_prefix)
    report(api, job_id, "running")
    report(api, job_id, "failed", exit_code=2, stdout="o", stderr="e")
    assert rclient.exists(*job_parts(keys, job_id)) == 4
    retried = api.post(f"/jobs/{job_id}/retry").json()
    assert "stdout" not in retried and "stderr" not in retried
    assert retried["env_vars"] == BIG_ENV
    assert rclient.exists(*job_parts(keys, job_id)) == 2  # the head and the spec


def whole_record(job: dict[str, Any]) -> bytes:
    """The job's record as a version before the split stored it: one value, the wire's."""
    return json.dumps(job, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_whole_record_is_read_changed_and_split_once(
    big_job: Any, rclient: redis.Redis, make_settings: SettingsFactory
) -> None:
    api, settings, job_id = big_job
    keys = Keys(settings.redis_prefix)
    before = stored_job(rclient, keys, job_id)
    before["stderr"] = "from an earlier attempt"
    rclient.delete(*job_parts(keys, job_id), keys.records_split)  # as an earlier version left it
    rclient.set(keys.job(job_id), whole_record(before))
    assert api.get(f"/jobs/{job_id}").json() == before

    # A script changes it before the upgrade has split it: read and kept as it is.
    assert report(api, job_id, "running").json()["env_vars"] == BIG_ENV
    ran = api.get(f"/jobs/{job_id}").json()
    assert ran == {**before, "status": "running", "running_at": ran["running_at"]}

    store = SyncJobStore.connect(settings)
    try:
        assert store.split_records() == 1
        assert stored_job(rclient, keys, job_id) == ran
        head = json.loads(rclient.get(keys.job(job_id)) or b"")
        assert "env_vars" not in head and "stderr" not in head
        assert rclient.exists(keys.records_split)
        assert store.split_records() == 0
    finally:
        store.close()


def test_the_split_leaves_a_record_changed_while_it_read_it(
    big_job: Any, rclient: redis.Redis
) -> None:
    from scheduler.store.scripts import snapshot

    _, settings, job_id = big_job
    keys = Keys(settings.redis_prefix)
    whole = whole_record(stored_job(rclient, keys, job_id))
    rclient.set(keys.job(job_id), whole)
    store = SyncJobStore.connect(settings)
    try:
        changed = whole.replace(b'"status":"pending"', b'"status":"pending","x":1')
        rclient.set(keys.job(job_id), changed)
        assert store.run(snapshot.split_record(job_id, whole)) == 0
        assert rclient.get(keys.job(job_id)) == changed
    finally:
        store.close()


def test_parts_go_with_the_job_at_retention(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings(job_retention_secs=1)
    api = make_client(settings)
    register(api, "n1")
    job_id = submit(api, command="c")["job_id"]
    report(api, job_id, "running")
    report(api, job_id, "done", exit_code=0, stdout="o", stderr="e")
    keys = Keys(settings.redis_prefix)
    store = SyncJobStore.connect(settings)
    try:
        rclient.delete(keys.dirty)
        assert store.prune_finished(now=10**10) == [job_id]
    finally:
        store.close()
    assert rclient.exists(*job_parts(keys, job_id)) == 0

"""A job's record in a real Redis (models/record.py): its large parts kept apart, so no
script's arguments, reads or answers carry them and a transition costs the same for any job;
every reader gets the record as before; a whole record of an earlier version is read as it
is and split once at start (SyncJobStore.split_records)."""

from __future__ import annotations

import codecs
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from scheduler.models.record import INLINE_BYTES
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.records import job_parts
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report, submit
from tests.records import stored_job, stored_record

BIG_ENV = {f"VAR_{i}": "v" * 100 for i in range(2000)}  # ~220 KB
BIG_OUT = "é" * 200_000  # 400 KB of two-byte characters
# What a script may do with a part apart: rename a staged one into place, drop it, or read
# its length or its tail.
SCRIPT_CALLS = ("EVAL", "FCALL")
PART_COMMANDS = {"RENAME", "PERSIST", "DEL", "STRLEN", "GETRANGE"}


def monitored(r: redis.Redis, act: Callable[[], Any]) -> list[tuple[str, list[str]]]:
    """The commands Redis ran while `act` ran (MONITOR), each with its client's kind
    ("lua": a script's)."""
    marker = "end-of-act"
    seen: list[tuple[str, list[str]]] = []
    with r.monitor() as monitor:
        ready = threading.Event()

        def listen() -> None:
            ready.set()
            for entry in monitor.listen():
                words = str(entry["command"]).split()
                if marker in words:
                    return
                seen.append((str(entry.get("client_type")), words))

        thread = threading.Thread(target=listen)
        thread.start()
        ready.wait()
        act()
        r.echo(marker)
        thread.join(timeout=60)
    return seen


def unescaped(word: str) -> bytes:
    """A MONITOR argument's bytes (it shows them quoted, with \\xHH escapes)."""
    return codecs.escape_decode(word.strip('"'))[0]  # type: ignore[attr-defined,no-any-return]


def touching(commands: list[list[str]], keys: list[str]) -> Iterator[list[str]]:
    for words in commands:
        if any(key.strip('"') in (w.strip('"') for w in words[1:]) for key in keys):
            yield words


@pytest.fixture
def big_job(make_client: ClientFactory, make_settings: SettingsFactory) -> Any:
    settings = make_settings()
    api = make_client(settings)
    register(api, "n1")
    job = submit(api, command="x" * 1000, env_vars=BIG_ENV, max_retries=0)
    return api, settings, job["job_id"]


def test_no_script_sees_a_large_part(big_job: Any, rclient: redis.Redis) -> None:
    api, settings, job_id = big_job
    keys = Keys(settings.redis_prefix)

    def life() -> None:
        polled = api.get("/jobs", params={"node_id": "n1", "status": "pending"}).json()
        assert [job["env_vars"] for job in polled] == [BIG_ENV]
        assert report(api, job_id, "running").status_code == 200
        done = report(api, job_id, "failed", exit_code=1, stdout=BIG_OUT, stderr=BIG_OUT)
        assert done.json()["stdout"] == BIG_OUT
        assert report(api, job_id, "failed", exit_code=1, stdout=BIG_OUT).status_code == 200
        assert api.get(f"/jobs/{job_id}/attempts").json()[-1]["stdout"]
        assert api.post(f"/jobs/{job_id}/retry").json()["env_vars"] == BIG_ENV
        assert report(api, job_id, "running").status_code == 200
        assert api.delete(f"/jobs/{job_id}").json()["status"] == "cancelling"

    seen = monitored(rclient, life)
    scripts = [words for kind, words in seen if kind == "lua"]
    calls = [words for _, words in seen if words[0].strip('"').upper().startswith(SCRIPT_CALLS)]
    assert scripts and calls, "MONITOR saw no script"
    # No script was sent, read or wrote a value larger than a head keeps (an attempt holds
    # both outputs' tails: up to twice that).
    arguments = [words[2:] for words in calls] + scripts  # not an EVAL's script text
    largest = max(len(unescaped(word)) for words in arguments for word in words)
    assert largest < 2 * INLINE_BYTES
    touched = list(touching(scripts, job_parts(keys, job_id)[1:]))
    assert touched, "the scripts placed no part"
    assert {words[0].strip('"').upper() for words in touched} <= PART_COMMANDS, touched
    assert len(rclient.get(keys.job(job_id)) or b"") < 2 * INLINE_BYTES
    assert not list(rclient.scan_iter(keys.staged("*")))  # every staged part was placed


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
    report(api, job_id, "failed", exit_code=2, stdout=BIG_OUT, stderr=BIG_OUT)
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
        assert store.run(ops.upkeep.split_records()) == 1
        assert stored_job(rclient, keys, job_id) == ran
        head = json.loads(rclient.get(keys.job(job_id)) or b"")
        assert "env_vars" not in head and head["_parts"] == {"spec": ""}
        assert head["stderr"] == "from an earlier attempt"  # small: kept in the head
        assert rclient.exists(keys.records_split)
        assert store.run(ops.upkeep.split_records()) == 0
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
    report(api, job_id, "done", exit_code=0, stdout=BIG_OUT, stderr=BIG_OUT)
    keys = Keys(settings.redis_prefix)
    assert rclient.exists(*job_parts(keys, job_id)) == 3  # the spec is small: in the head
    store = SyncJobStore.connect(settings)
    try:
        rclient.delete(keys.dirty)
        assert store.run(ops.upkeep.prune_finished(now=10**10)) == [job_id]
    finally:
        store.close()
    assert rclient.exists(*job_parts(keys, job_id)) == 0


def test_a_large_record_survives_the_snapshot_and_a_restore_in_parts(
    big_job: Any, rclient: redis.Redis
) -> None:
    from scheduler.snapshot.restore import restore_if_empty
    from scheduler.snapshot.writer import snapshot_once
    from tests.snapshot_helpers import lose_redis_data

    api, settings, job_id = big_job
    keys = Keys(settings.redis_prefix)
    report(api, job_id, "running")
    report(api, job_id, "done", exit_code=0, stdout=BIG_OUT, stderr="small")
    before = stored_record(rclient, keys, job_id)
    assert snapshot_once(settings) == 1
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings) is True
    assert stored_record(rclient, keys, job_id) == before
    head = json.loads(rclient.get(keys.job(job_id)) or b"")
    assert set(head["_parts"]) == {"spec", "stdout"} and head["stderr"] == "small"
    # A repeated report of the same large output is still told from its digest.
    repeated = report(api, job_id, "done", exit_code=0, stdout=BIG_OUT, stderr="small")
    assert repeated.status_code == 200
    assert report(api, job_id, "done", exit_code=0, stdout=BIG_OUT + "!").status_code == 409

"""The upgrade to namespaces in a real Redis (ops.upkeep.index_namespaces): jobs an earlier
version made, in no namespace's index, are put in their namespace's indexes once, at start;
listings by namespace then find them, and their next move keeps the indexes exact."""

from __future__ import annotations

import redis

from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report, submit


def namespace_keys(rclient: redis.Redis, keys: Keys) -> dict[str, list[str]]:
    """Every namespace index with its members, and the namespaces in use."""
    found = {}
    for key in rclient.scan_iter(keys.namespace_jobs("*").replace(":jobs", ":*")):
        if rclient.type(key) != b"zset":
            continue  # a namespace's sums (quotas), or the quotas themselves
        found[key.decode()] = sorted(m.decode() for m in rclient.zrange(key, 0, -1))
    found[keys.namespaces] = sorted(m.decode() for m in rclient.smembers(keys.namespaces))
    return found


def test_an_earlier_versions_jobs_are_indexed_once_as_creation_indexes_them(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    api = make_client(settings=settings)
    register(api, "n1")
    done = submit(api, command="x")["job_id"]
    report(api, done, "running")
    report(api, done, "done")
    pending = submit(api, command="y", namespace="team-a")["job_id"]
    running = submit(api, command="z", namespace="team-a", cpus=1)["job_id"]
    report(api, running, "running")
    keys = Keys(settings.redis_prefix)
    made = namespace_keys(rclient, keys)
    assert rclient.hgetall(keys.namespace_held("team-a")) == {b"cpus": b"1"}
    assert made[keys.namespace_status("", "done")] == [done]
    assert made[keys.namespace_status("team-a", "pending")] == [pending]

    # As an earlier version left them: no namespace index, no namespaces in use, no marker.
    rclient.delete(*[key for key in made if key != keys.namespaces], keys.namespaces)
    rclient.delete(keys.namespaces_indexed, keys.namespace_held("team-a"))
    assert api.get("/jobs", params={"namespace": "default"}).json() == []

    store = SyncJobStore.connect(settings)
    try:
        assert store.run(ops.upkeep.index_namespaces(batch=1)) == 3
        assert namespace_keys(rclient, keys) == made
        # The running job's asks count in its namespace's sums (quotas), once.
        assert rclient.hgetall(keys.namespace_held("team-a")) == {b"cpus": b"1"}
        assert rclient.exists(keys.namespaces_indexed)
        assert store.run(ops.upkeep.index_namespaces()) == 0  # once
        rclient.delete(keys.namespaces_indexed)  # a pass again (one stopped midway): the same
        assert store.run(ops.upkeep.index_namespaces()) == 3
        assert rclient.hgetall(keys.namespace_held("team-a")) == {b"cpus": b"1"}
    finally:
        store.close()
    listed = api.get("/jobs", params={"namespace": "default"}).json()
    assert [job["job_id"] for job in listed] == [done]
    report(api, pending, "running")
    in_team_a = rclient.zrange(keys.namespace_status("team-a", "running"), 0, -1)
    assert sorted(in_team_a) == sorted([pending.encode(), running.encode()])
    assert not rclient.exists(keys.namespace_status("team-a", "pending"))

"""Where a job is in Redis, read back from every key of a deployment, and where the table
(store/scripts/places.py PLACES) says it should be: the tests of the generated Lua and of the
scripts that use it compare the two."""

from __future__ import annotations

import redis

from scheduler.store.keys import Keys
from scheduler.store.scripts.places import Index, Only, indexes, row_of


def found_in(rclient: redis.Redis, keys: Keys, job_id: str) -> set[str]:
    """Every key of the deployment that holds `job_id` as a member (a sorted set's or a
    set's) or a field (a hash's)."""
    found = set()
    for raw in rclient.scan_iter(match=keys.pattern(), count=1000):
        key = raw.decode()
        kind = rclient.type(key).decode()
        held = (
            (kind == "zset" and rclient.zscore(key, job_id) is not None)
            or (kind == "set" and bool(rclient.sismember(key, job_id)))
            or (kind == "hash" and bool(rclient.hexists(key, job_id)))
        )
        if held:
            found.add(key)
    return found


def key_of(
    keys: Keys, index: Index, status: str, node: str, schedule: str, namespace: str = ""
) -> str:
    """The key of `index` for a job in place (`status`, `node`), made by `Keys` itself."""
    member = getattr(keys, index.key)
    values = {"status": status, "node": node, "schedule": schedule, "namespace": namespace}
    return member(*(values[arg] for arg in index.args)) if index.args else member  # type: ignore[no-any-return]


def expected(
    keys: Keys,
    status: str,
    node: str,
    *,
    service: bool = False,
    schedule: str = "",
    namespace: str = "",
    over_quota: bool = False,
) -> set[str]:
    """The keys the table puts a job in (its record aside, and the `dirty` set of the
    snapshot, which are not its place): its indexes, and its node's held set while it holds
    its asks there. `over_quota`: its pending_reason is quota (it waits for its namespace's)."""
    wanted = set()
    skipped = {
        Only.RUN: service,
        Only.SCHEDULED: not schedule,
        Only.PLACEABLE: over_quota,
        Only.OVER_QUOTA: not over_quota,
    }
    for index in indexes(status, node != ""):
        if skipped.get(index.only, False):
            continue
        wanted.add(key_of(keys, index, status, node, schedule, namespace))
    if row_of(status).holds and node:
        wanted.add(keys.node_held(node))
    return wanted


def place_of(rclient: redis.Redis, keys: Keys, job_id: str) -> set[str]:
    """`found_in` less the keys that are not a job's place (the snapshot's changed sets, the
    dependents of a job it runs after)."""
    apart = {keys.dirty, keys.dirty_inflight}
    return {
        key
        for key in found_in(rclient, keys, job_id)
        if key not in apart and not key.startswith((keys.dependents(""), keys.ending_waiters("")))
    }

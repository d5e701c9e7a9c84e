"""The upgrade from the layout before the hash tag: keys were "P:..." (P = REDIS_PREFIX), now
"{P}:..." (store/keys.py says why).

`rename_legacy_keys` runs at the start of serve and of a worker, under the restore lock and
before the restore decision: that decision reads the `initialised` marker, and a deployment
whose state still sits under the old names would look empty and get the older SQLite snapshot
restored over it. Each key is RENAMEd (atomic, keeps its TTL); the old marker is renamed last,
so while it exists the upgrade is unfinished, and the next start after a crash resumes it.
rq's part (its queues and jobs under "rq:") is workers/rq_migrate.py's.

Processes of the old version must be stopped first: one still running would go on in the old
layout, and the deployment would split in two. So the upgrade refuses (OldLayoutAlive, which
names what it saw; nothing is changed) while one is seen: an rq worker of the old layout
registered on our queues (rq's registration lives while the worker does), an old API holding
a long-poll (subscribed to an old wake-up channel), or the old layout's counters, heartbeats
and queues changing while watched for UPGRADE_WATCH_SECS.

Once renamed, the old names are retired, not left empty: the old marker holds RETIRED, so an
old process that starts (or whose snapshot writer looks) finds its restore question answered
and never restores the SQLite snapshot into the old layout; the old job counter holds RETIRED
too, so an old API cannot number a job (its INCR fails: 500, not a second job-11). What an old
process writes after that is found by `old_layout_findings` (the API checks it periodically:
log, metric, /health); the new version never reads the old keys otherwise.

Only a standalone Redis is upgraded: the old layout could never run on a cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import LockNotOwnedError
from redis.lock import Lock

from scheduler.store.connection.blocking import LocatedPool
from scheduler.store.keys import Keys
from scheduler.store.legacy_keys import LegacyKeys

log = logging.getLogger("scheduler.store.migrate")

RENEW_EVERY = 1000  # renamed keys between calls of keep_alive (the caller's lock)
# What the retired old marker and job counter hold; the rest names the new root.
RETIRED = "retired:"
WATCH_STEP_SECS = 0.5  # how often the old keys are read while watched
# The deployment's rq queues are Keys.rq_queue(kind) of these (workers.queues.KINDS, here
# without importing rq: the API checks the old layout too).
RQ_KINDS = ("periodic", "events")


class OldLayoutAlive(RuntimeError):
    """A process of the layout before the hash tag is still running: the upgrade waits for
    it to stop (docs/UPGRADING.md). `findings` says what was seen."""

    def __init__(self, findings: list[str]) -> None:
        super().__init__("; ".join(findings))
        self.findings = findings


def rename_legacy_keys(
    client: redis.Redis,
    keys: Keys,
    keep_alive: Callable[[], object] = lambda: None,
    *,
    watch_secs: float = 0.0,
    lock: Lock | None = None,
) -> int:
    """Rename this deployment's old-layout keys into the new layout, if there are any and
    the new layout is not initialised yet. Returns how many keys were renamed. Raises
    OldLayoutAlive, having changed nothing, while a process of the old layout is seen (watching
    the old keys `watch_secs` for changes). With `lock` (the restore lock the caller holds),
    the last step, which finishes the upgrade, is made only while it is still held."""
    if is_cluster(client):
        return 0
    old = LegacyKeys(keys.prefix)
    old_seq = old.of(keys.job_seq, keys)
    if client.exists(keys.initialised):
        return 0
    marker, counter = client.mget(old.initialised, old_seq)
    if _retired(marker) or _retired(counter):
        return 0  # only the tombstones of a finished upgrade (the new layout was emptied)
    if marker is None and not client.exists(old_seq, old.of(keys.all_jobs, keys)):
        return 0
    refuse_while_alive(client, keys.prefix, watch_secs, keep_alive)
    if marker is None:
        # A deployment older than the marker: the marker first, so a crash midway still
        # leaves an old marker that says "unfinished". It holds jobs: settled, as _decide
        # (snapshot/restore.py) would say.
        client.set(old.initialised, "found jobs in Redis", nx=True)
    # An old lock belongs to a process that is gone (its TTL ends it); renamed, it would
    # replace the restore lock this upgrade runs under.
    old_locks = old.of(keys.lock(""), keys)
    renamed = 0
    for raw in client.scan_iter(match=old.pattern(), count=1000):
        key = _text(raw)
        if key == old.initialised or not old.owns(key) or key.startswith(old_locks):
            continue
        if _rename(client, key, old.renamed(key, keys)):
            renamed += 1
            if renamed % RENEW_EVERY == 0:
                keep_alive()
    _finish(client, keys, lock)
    log.info(
        "upgrade: renamed %d keys from %s* to %s* (Redis Cluster hash tag); %s and %s now "
        "hold %r (an old process finds them there)",
        renamed + 1,
        old.root,
        keys.root,
        old.initialised,
        old_seq,
        retired_text(keys),
    )
    return renamed + 1


def retired_text(keys: Keys) -> str:
    return (
        f"{RETIRED} this deployment moved to {keys.root}* (upgrade to the hash tag); "
        "stop every process of the old version (docs/UPGRADING.md)"
    )


def _retired(value: bytes | str | None) -> bool:
    return value is not None and _text(value).startswith(RETIRED)


def _finish(client: redis.Redis, keys: Keys, lock: Lock | None) -> None:
    """The old marker renamed last, and the old names retired, in one transaction; with
    `lock`, only if it is still this process's (WATCHed: one taken over meanwhile aborts it)."""
    old = LegacyKeys(keys.prefix)
    retired = retired_text(keys)
    with client.pipeline(transaction=True) as pipe:
        if lock is not None:
            pipe.watch(lock.name)  # type: ignore[no-untyped-call]
            token = lock.local.token
            holder = pipe.get(lock.name)
            if token is None or holder is None or _text(holder) != _text(token):
                raise LockNotOwnedError("restore lock lost during the upgrade")
            pipe.multi()
        pipe.rename(old.initialised, keys.initialised)
        pipe.set(old.initialised, retired)
        pipe.set(old.of(keys.job_seq, keys), retired)
        try:
            pipe.execute()
        except redis.WatchError:
            raise LockNotOwnedError("restore lock lost during the upgrade") from None


def refuse_while_alive(
    client: redis.Redis,
    prefix: str,
    watch_secs: float,
    keep_alive: Callable[[], object] = lambda: None,
) -> None:
    """Raise OldLayoutAlive if a process of the old layout is seen now (old_processes), or
    the old keys a running one writes change within `watch_secs`."""
    found = old_processes(client, prefix)
    if found:
        raise OldLayoutAlive(found)
    if watch_secs <= 0:
        return
    log.info(
        "upgrade: watching %s* for %.0f s for processes of the old version still writing",
        LegacyKeys(prefix).root,
        watch_secs,
    )
    first, deadline = _fingerprint(client, prefix), time.monotonic() + watch_secs
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(WATCH_STEP_SECS, left))
        keep_alive()
        found = old_processes(client, prefix)
        now = _fingerprint(client, prefix)
        changed = [name for name, value in first.items() if now[name] != value]
        if changed:
            found.append(
                f"old keys changing: {', '.join(changed)} (a process of the old version "
                "writes them: an API taking heartbeats or jobs, or a worker)"
            )
        if found:
            raise OldLayoutAlive(found)


def old_processes(client: redis.Redis, prefix: str) -> list[str]:
    """What shows a process of the old layout running now: its rq workers registered on our
    queues, alive (rq's registration, with its TTL and no `death`), and its API's long-polls
    (a subscription to an old wake-up channel)."""
    found = [
        f"rq worker {worker} of the old layout (queues {queues}, host {host}, pid {pid}, last "
        f"heartbeat {beat}; if it is gone, its registration expires in {ttl} s)"
        for worker, queues, host, pid, beat, ttl in _old_rq_workers(client, prefix)
    ]
    channels = sorted(_text(c) for c in client.pubsub_channels(LegacyKeys(prefix).channels()))
    if channels:
        found.append(
            f"an API of the old layout holds long-polls (subscribed to {', '.join(channels[:3])}"
            f"{', ...' if len(channels) > 3 else ''})"
        )
    return found


def _old_rq_workers(client: redis.Redis, prefix: str) -> list[tuple[str, ...]]:
    keys = Keys(prefix)
    with client.pipeline(transaction=False) as pipe:
        for kind in RQ_KINDS:
            pipe.smembers(LegacyKeys.rq_workers(keys.rq_queue(kind)))
        members = sorted({_text(m) for found in pipe.execute() for m in found})
    if not members:
        return []
    with client.pipeline(transaction=False) as pipe:
        for worker in members:
            pipe.hmget(worker, "queues", "hostname", "pid", "last_heartbeat", "death")
            pipe.ttl(worker)
        replies = pipe.execute()
    alive: list[tuple[str, ...]] = []
    for worker, fields, ttl in zip(members, replies[::2], replies[1::2], strict=True):
        queues, host, pid, beat, death = (None if f is None else _text(f) for f in fields)
        if ttl == -2 or death is not None:
            continue  # gone: stopped (death), or its registration expired
        alive.append((worker, queues or "?", host or "?", pid or "?", beat or "never", str(ttl)))
    return alive


def _fingerprint(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """What a running old process changes, by old key name: counters (jobs, events,
    placements, services), the latest node heartbeat, the outbox, changed jobs, counters of
    the workers' work, the rq queues of our deployment."""
    keys, old = Keys(prefix), LegacyKeys(prefix)
    names: list[str] = []
    with client.pipeline(transaction=False) as pipe:
        for key in (keys.job_seq, keys.event_seq, keys.rr_seq, keys.service_seq):
            names.append(old.of(key, keys))
            pipe.get(names[-1])
        names.append(old.of(keys.nodes_seen, keys))
        pipe.zrange(names[-1], -1, -1, withscores=True)
        names.append(old.of(keys.outbox, keys))
        pipe.llen(names[-1])
        names.append(old.of(keys.dirty, keys))
        pipe.scard(names[-1])
        names.append(old.of(keys.stats, keys))
        pipe.hgetall(names[-1])
        for kind in RQ_KINDS:
            names.append(LegacyKeys.rq("queue", keys.rq_queue(kind)))
            pipe.llen(names[-1])
        return dict(zip(names, pipe.execute(), strict=True))


def old_layout_findings(client: redis.Redis, prefix: str) -> list[str]:
    """After the upgrade (or in a deployment that never had the old layout): whatever of the
    old layout is in use or left, one line each; [] when nothing. Two round trips (three with
    old rq workers registered)."""
    if is_cluster(client):
        return []
    keys, old = Keys(prefix), LegacyKeys(prefix)
    found = old_processes(client, prefix)
    settled = [old.of(key, keys) for key in _settled(keys)]
    rq_work = [key for kind in RQ_KINDS for key in LegacyKeys.rq_work(keys.rq_queue(kind))]
    with client.pipeline(transaction=False) as pipe:
        pipe.mget(old.initialised, old.of(keys.job_seq, keys))
        for key in (*settled, *rq_work):
            pipe.exists(key)
        (marker, counter), *present = pipe.execute()
    if marker is not None and not _retired(marker):
        found.append(
            f"{old.initialised} holds {_text(marker)!r}: the upgrade is unfinished, or an old "
            "process answered its restore question again"
        )
    if counter is not None and not _retired(counter):
        found.append(f"{old.of(keys.job_seq, keys)} holds {_text(counter)!r}")
    left = [key for key, n in zip(settled, present[: len(settled)], strict=True) if n]
    if left:
        found.append(f"keys of the old layout: {', '.join(left)}")
    work = [key for key, n in zip(rq_work, present[len(settled) :], strict=True) if n]
    if work:
        found.append(f"rq work of the old layout not moved: {', '.join(work)}")
    return found


def _settled(keys: Keys) -> tuple[str, ...]:
    """The new names of the old layout's keys without a variable part, but the marker and
    the job counter (retired): one of them there again means an old process wrote it."""
    return (
        keys.all_jobs, keys.deadlines, keys.finished, keys.cancelling, keys.dirty,
        keys.dirty_inflight, keys.restoring, keys.outbox, keys.nodes, keys.nodes_seen,
        keys.nodes_compute, keys.services, keys.node_tokens, keys.tokens, keys.stats,
        keys.rr_seq, keys.event_seq, keys.service_seq, keys.registry_readable_since,
    )  # fmt: skip


def is_cluster(client: object) -> bool:
    """Whether `client` speaks to a Redis Cluster (nothing of the old layout can be there)."""
    pool = getattr(client, "connection_pool", None)
    return isinstance(client, RedisCluster) or isinstance(pool, LocatedPool)


def _rename(client: redis.Redis, source: str, target: str) -> bool:
    """RENAME, False when the source is gone (SCAN may return a key twice, a TTL may end)."""
    try:
        client.rename(source, target)
    except redis.ResponseError as exc:
        if "no such key" not in str(exc).lower():
            raise
        return False
    return True


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

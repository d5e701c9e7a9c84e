"""The job store: owns the Redis client and the registered scripts, runs `commands.Call`s.

`JobStore` is the asyncio flavour the API uses; `SyncJobStore` is the blocking one the rq
workers use. Each runs every call as one EVALSHA (loading the script when Redis lacks it).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import hiredis
import msgspec
import redis
from redis.exceptions import NoScriptError

from scheduler.config import Settings
from scheduler.models import STATUSES, JobUpdate, Node, NodeRegistration, Service, rfc3339
from scheduler.nodes.placement import Placement, live_node_ids
from scheduler.store import (
    commands,
    node_commands,
    node_scripts,
    scripts,
    upkeep_commands,
    upkeep_scripts,
)
from scheduler.store.commands import Call, Created
from scheduler.store.keys import Keys
from scheduler.store.notify import Notifier, wait_until
from scheduler.store.redis_mux import READ_COST, WRITE_COST, MuxRedis, Reply, script_command
from scheduler.store.topology import ReplicasNotAcked, sync_client

_node_decoder = msgspec.json.Decoder(Node)


class _Status(msgspec.Struct):
    status: str = ""


_status_decoder = msgspec.json.Decoder(_Status)

T = TypeVar("T")
# A call sent without a coroutine (JobStore.send_poll): its reply, how to read it.
Sending: TypeAlias = tuple[Reply, Callable[[Any], T]]

# Services the built-in registry keeps (each a few hundred bytes): a node's oldest finished
# ones go past MAX_SERVICES_PER_NODE; past either limit with none to drop, POST /services
# answers 503 (the Rust agent then runs the service untracked).
MAX_SERVICES, MAX_SERVICES_PER_NODE = 100_000, 100
DELETE_MOVES = 1000  # pending jobs a node deregistration moves in its own script
Moves = list[upkeep_commands.Requeued]  # (JobStore.list shadows the builtin in its class body)

SCRIPT_NAMES = (
    "CREATE_JOB",
    "PICK_NODE",
    "POLL",
    "LIST",
    "TRANSITION",
    "CANCEL_JOB",
    "FINISH_CANCELS",
    "CHECK_REPORT",
    "SWEEP_TIMEOUTS",
    "PRUNE_FINISHED",
    "REQUEUE_LOST",
    "LOSE_RUNNING",
    "REGISTER_NODE",
    "HEARTBEAT",
    "DELETE_NODE",
    "TRIM_OUTBOX",
    "TAKE_DIRTY",
    "RESTORE_JOBS",
    "FINISH_RESTORE",
    "OVERVIEW",
    "CREATE_SERVICE",
    "SET_SERVICE_STATUS",
    "LIST_SERVICES",
)
# The scripts that only read (tests/store/test_replicas_acked.py runs each under Redis' own
# no-writes check). Every other call waits for REDIS_MIN_REPLICAS_ACKED replicas.
READ_ONLY = frozenset(("POLL", "LIST", "CHECK_REPORT", "OVERVIEW", "LIST_SERVICES"))


@dataclass(frozen=True, slots=True)
class _Source:
    text: str
    sha: str


def _source(name: str) -> _Source:
    modules = (scripts, node_scripts, upkeep_scripts)
    text: str = next(getattr(m, name) for m in modules if hasattr(m, name))
    return _Source(text, hashlib.sha1(text.encode()).hexdigest())


_SOURCES = {name: _source(name) for name in SCRIPT_NAMES}


def _acks(settings: Settings, script: str) -> tuple[int, int]:
    """(replicas to wait for, WAIT timeout in ms) for a call of `script`; 0: no WAIT."""
    if script in READ_ONLY:
        return 0, 0
    return settings.redis_min_replicas_acked, settings.redis_replicas_ack_timeout_ms


@functools.lru_cache(maxsize=1024)
def _poll_command(keys: Keys, node_id: str, limit: int, caller: str) -> bytes:
    """The poll's EVALSHA, packed. An agent polls with the same node and token every few
    seconds, and building and packing the command was a third of a poll's Python time. What
    the cache holds decides nothing: the script checks the caller against Redis each time."""
    call = commands.poll(keys, node_id, limit, caller)
    command = script_command("EVALSHA", _SOURCES[call.script].sha, call.keys, call.args)
    packed: bytes = hiredis.pack_command(command)
    return packed


def index_key(keys: Keys, node_id: str, status: str) -> str:
    """The index that answers GET /jobs with these filters (both optional)."""
    if node_id and status:
        return keys.node_status(node_id, status)
    if node_id:
        return keys.node_jobs(node_id)
    if status:
        return keys.status(status)
    return keys.all_jobs


class JobStore:
    """Asyncio store for the API processes, on one multiplexed connection (redis_mux)."""

    def __init__(self, client: MuxRedis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.redis_prefix)
        # Long-polls wait here, never on `client` (notify.py).
        self.notifier = Notifier(settings.redis_url, settings.redis_prefix)

    @classmethod
    def connect(cls, settings: Settings) -> JobStore:
        # A WAIT may hold a reply for its whole timeout: the stall watchdog must outlast it.
        timeout = max(10.0, 2 * settings.redis_replicas_ack_timeout_ms / 1000)
        return cls(
            MuxRedis(settings.redis_url, timeout=timeout, prefix=settings.redis_prefix), settings
        )

    async def aclose(self) -> None:
        await self.notifier.aclose()
        await self.redis.aclose()

    async def run(self, call: Call[T]) -> T:
        source = _SOURCES[call.script]
        replicas, timeout_ms = _acks(self.settings, call.script)
        cost = READ_COST if call.script in READ_ONLY else WRITE_COST
        reply = await self.redis.evalsha(
            source.sha, source.text, call.keys, call.args, replicas, timeout_ms, cost
        )
        return call.parse(reply)

    async def create(self, job_json: bytes, placement: Placement, now: float) -> bytes:
        s = self.settings
        created = await self.run(
            commands.create_job(self.keys, job_json, placement, now, s.node_ttl_secs)
        )
        return created.job

    async def pick(self, placement: Placement, now: float) -> str:
        return await self.run(
            commands.pick_node(self.keys, placement, now, self.settings.node_ttl_secs)
        )

    async def poll(self, node_id: str, caller: str) -> commands.Polled:
        limit = self.settings.max_jobs_per_node
        return await self.run(commands.poll(self.keys, node_id, limit, caller))

    def send_poll(self, node_id: str, caller: str) -> Sending[commands.Polled] | None:
        """`poll` sent at once, for a caller that goes on in a callback (the hot lane): its
        Reply and how to read it, or None with no connection open yet (await `poll`).
        The reply fails with NoScriptError when Redis forgot the script, which `poll` loads.
        (A read: never a WAIT for replicas.)"""
        limit = self.settings.max_jobs_per_node
        sent = self.redis.send_packed(_poll_command(self.keys, node_id, limit, caller))
        return None if sent is None else (sent, commands.polled)

    async def poll_wait(self, node_id: str, caller: str, wait: float) -> commands.Polled:
        """The poll, answered once the node has work (or a job to cancel) or after `wait`
        seconds."""
        channel = self.keys.node_channel(node_id)
        return await wait_until(
            self.notifier, channel, lambda: self.poll(node_id, caller), bool, wait
        )

    async def get_wait(self, job_id: str, status_not: str, wait: float) -> bytes | None:
        """The job, answered once its status is not `status_not` (without one: once it
        differs from what it was), when it does not exist, or after `wait` seconds."""
        first = await self.get(job_id)

        def done(blob: bytes | None) -> bool:
            if blob is None:
                return True
            if status_not:
                return _status_decoder.decode(blob).status != status_not
            return blob != first

        if done(first) and (status_not or first is None):
            return first
        channel = self.keys.job_channel(job_id)
        return await wait_until(self.notifier, channel, lambda: self.get(job_id), done, wait)

    async def list(
        self, node_id: str, status: str, bound: int, limit: int, newest: bool = False
    ) -> list[bytes]:
        """A page of jobs (commands.list_jobs)."""
        if status and status not in STATUSES:
            return []
        index = index_key(self.keys, node_id, status)
        budget = self.settings.max_page_bytes
        call = commands.list_jobs(self.keys, index, bound, limit, budget, newest)
        return await self.run(call)

    async def get(self, job_id: str) -> bytes | None:
        blob: bytes | None = await self.redis.execute("GET", self.keys.job(job_id))
        return blob

    def send_get(self, job_id: str) -> Reply | None:
        """`get` sent at once (as `send_poll`)."""
        return self.redis.send_now("GET", self.keys.job(job_id))

    async def report(self, job_id: str, update: JobUpdate, now: float, caller: str) -> bytes:
        retries = self.settings.max_job_retries
        call = commands.transition(self.keys, job_id, update, now, retries, caller)
        return await self.run(call)

    async def check_report(self, job_id: str, caller: str) -> None:
        """Raises as `report` would for an unknown job or a caller that may not report on it."""
        await self.run(commands.check_report(self.keys, job_id, caller))

    async def overview(self) -> node_commands.Overview:
        return await self.run(node_commands.overview(self.keys, STATUSES))

    # The built-in registry (REGISTRY_URL unset).

    async def create_service(self, service: Service, caller: str) -> bytes:
        call = node_commands.create_service(
            self.keys,
            service.node_id,
            msgspec.json.encode(service),
            caller,
            MAX_SERVICES,
            MAX_SERVICES_PER_NODE,
        )
        return await self.run(call)

    async def service(self, service_id: str) -> bytes | None:
        blob: bytes | None = await self.redis.execute("HGET", self.keys.services, service_id)
        return blob

    async def set_service_status(self, service_id: str, status: str, caller: str) -> None:
        await self.run(node_commands.set_service_status(self.keys, service_id, status, caller))

    async def services(self, node_id: str, status: str, caller: str) -> builtins.list[bytes]:
        return await self.run(node_commands.list_services(self.keys, node_id, status, caller))

    async def register_node(
        self, reg: NodeRegistration, now: float, who: node_commands.Registration, token_hash: str
    ) -> tuple[Node, str]:
        """The node as registered, and what became of the token (node_commands.register_node)."""
        node = Node(
            id=reg.id,
            hostname=reg.hostname,
            addr=reg.addr,
            cpu_count=reg.cpu_count,
            role=reg.role or "compute",
        )
        node_json = msgspec.json.encode(node)
        call = node_commands.register_node(
            self.keys, node.id, node_json, node.role, now, who, token_hash
        )
        outcome = await self.run(call)
        return msgspec.structs.replace(node, status="healthy", last_seen=rfc3339(now)), outcome

    async def heartbeat(
        self, node_id: str, now: float, caller: str
    ) -> tuple[Node, builtins.list[str]]:
        """The node, and the ids of its jobs being cancelled."""
        blob, cancels = await self.run(node_commands.heartbeat(self.keys, node_id, now, caller))
        node = _node_decoder.decode(blob)
        return msgspec.structs.replace(node, status="healthy", last_seen=rfc3339(now)), cancels

    async def cancel(self, job_id: str, now: float) -> bytes:
        return await self.run(commands.cancel_job(self.keys, job_id, now))

    async def delete_node(self, node_id: str, now: float, caller: str) -> Moves:
        """Deregister a node; its pending jobs move to live nodes (the first DELETE_MOVES
        here, any others at the next sweep)."""
        ttl = self.settings.node_ttl_secs
        call = node_commands.delete_node(self.keys, node_id, now, ttl, DELETE_MOVES, caller)
        return await self.run(call)

    async def nodes(self, now: float) -> dict[str, Node]:
        """Every registered node, healthy while heard from within NODE_TTL_SECS."""
        # Sent back to back on the one connection, so this is one round trip.
        records, seen = await asyncio.gather(
            self.redis.execute("HGETALL", self.keys.nodes),
            self.redis.execute("ZRANGE", self.keys.nodes_seen, 0, -1, "WITHSCORES"),
        )
        last_seen = {str(seen[i], "utf-8"): float(seen[i + 1]) for i in range(0, len(seen), 2)}
        live = set(live_node_ids(last_seen, now, self.settings.node_ttl_secs))
        nodes = {}
        for raw_id, blob in zip(records[::2], records[1::2], strict=True):
            node_id = str(raw_id, "utf-8")
            seen_at = last_seen.get(node_id, 0.0)
            status = "healthy" if node_id in live else "unhealthy"
            nodes[node_id] = msgspec.structs.replace(
                _node_decoder.decode(blob), status=status, last_seen=rfc3339(seen_at)
            )
        return nodes


class SyncJobStore:
    """Blocking store for the rq workers and the command line."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.redis_prefix)
        self._scripts = {name: client.register_script(src.text) for name, src in _SOURCES.items()}

    @classmethod
    def connect(cls, settings: Settings) -> SyncJobStore:
        return cls(sync_client(settings), settings)

    def close(self) -> None:
        self.redis.close()

    def run(self, call: Call[T]) -> T:
        replicas, timeout_ms = _acks(self.settings, call.script)
        if not replicas:
            return call.parse(self._scripts[call.script](keys=call.keys, args=call.args))
        source = _SOURCES[call.script]
        try:
            reply = self._run_acked("EVALSHA", source.sha, call, replicas, timeout_ms)
        except NoScriptError:
            # A restarted or flushed Redis forgot the script: run its text, and WAIT still.
            reply = self._run_acked("EVAL", source.text, call, replicas, timeout_ms)
        return call.parse(reply)

    def _run_acked(
        self, how: str, script: str, call: Call[T], replicas: int, timeout_ms: int
    ) -> object:
        """The script and a WAIT for `replicas` in one round trip (no MULTI: WAIT may not
        run inside one)."""
        pipe = self.redis.pipeline(transaction=False)
        run = pipe.evalsha if how == "EVALSHA" else pipe.eval
        run(script, len(call.keys), *call.keys, *call.args)
        pipe.wait(replicas, timeout_ms)
        reply, acked = pipe.execute()
        if acked < replicas:
            raise ReplicasNotAcked(acked, replicas)
        return reply

    def create(
        self, job_json: bytes, placement: Placement, now: float, dedup_key: str, dedup_ttl: int
    ) -> Created:
        call = commands.create_job(
            self.keys, job_json, placement, now, self.settings.node_ttl_secs, dedup_key, dedup_ttl
        )
        return self.run(call)

    def finish_cancels(self, now: float, batch: int = 500) -> list[str]:
        """Cancel the jobs asked to stop more than CANCEL_GRACE_SECS ago whose agent has not
        reported them cancelled."""
        cutoff = now - self.settings.cancel_grace_secs
        ended: list[str] = []
        while True:
            swept = self.run(upkeep_commands.finish_cancels(self.keys, cutoff, now, batch))
            ended.extend(swept.ids)
            if swept.read < batch:
                return ended

    def sweep_timeouts(self, now: float, batch: int = 500) -> list[str]:
        """Fail every run job past JOB_TIMEOUT_SECS, `batch` per script call."""
        failed: list[str] = []
        while True:
            call = upkeep_commands.sweep_timeouts(
                self.keys, now, self.settings.job_timeout_secs, batch
            )
            swept = self.run(call)
            failed.extend(swept.ids)
            if swept.read < batch:
                return failed

    def prune_finished(self, now: float, batch: int = 500) -> list[str]:
        """Remove from Redis the jobs finished more than JOB_RETENTION_SECS ago that the
        snapshot already holds (none when the retention is 0: keep forever)."""
        if not self.settings.job_retention_secs:
            return []
        cutoff = now - self.settings.job_retention_secs
        removed: list[str] = []
        skip = 0
        while True:
            pruned = self.run(upkeep_commands.prune_finished(self.keys, cutoff, skip, batch))
            removed.extend(pruned.ids)
            skip += pruned.kept
            if pruned.read < batch:
                return removed

    def observe_nodes(self, node_ids: list[str], now: float) -> float:
        """External registry: these compute nodes were seen healthy at `now` (the sweep's
        record of them, which `requeue_lost` reads as the built-in registry's heartbeats).
        Returns since when the registry has been read without a failure."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.keys.registry_readable_since, now, nx=True)
        if node_ids:
            pipe.zadd(self.keys.nodes_compute, dict.fromkeys(node_ids, now))
        pipe.get(self.keys.registry_readable_since)
        return float(pipe.execute()[-1])

    def registry_unreadable(self) -> None:
        """The sweep could not read the external registry: the unbroken stretch ends."""
        self.redis.delete(self.keys.registry_readable_since)

    def requeue_lost(self, now: float, limit: int = 500) -> list[upkeep_commands.Requeued]:
        """Move the pending jobs of nodes lost for NODE_LOST_SECS to live nodes, `limit` per
        script call. Nodes are the built-in registry's, or the external registry's as the
        sweep saw them (`observe_nodes`)."""
        moved: list[upkeep_commands.Requeued] = []
        s = self.settings
        while True:
            call = upkeep_commands.requeue_lost(
                self.keys, now, s.node_lost_after, s.node_ttl_secs, limit
            )
            batch = self.run(call)
            moved.extend(batch)
            if len(batch) < limit:
                return moved

    def lose_running(self, now: float, limit: int = 500) -> list[upkeep_commands.Lost]:
        """The running jobs of nodes lost for NODE_LOST_SECS: run jobs fail as `node lost`
        (retried on a live node while retries are left), services are placed again."""
        lost: list[upkeep_commands.Lost] = []
        s = self.settings
        while True:
            call = upkeep_commands.lose_running(
                self.keys, now, s.node_lost_after, s.node_ttl_secs, s.max_job_retries, limit
            )
            batch = self.run(call)
            lost.extend(batch)
            if len(batch) < limit:
                return lost

    def outbox_head(self, limit: int) -> list[bytes]:
        """The oldest `limit` outbox entries ("<event number> <message JSON>"), not removed."""
        entries: list[bytes] = self.redis.lrange(self.keys.outbox, 0, limit - 1)  # type: ignore[assignment]
        return entries

    def trim_outbox(self, handed_over: list[bytes]) -> int:
        """Remove these entries (an `outbox_head` read, now handed to rq) from the outbox."""
        return self.run(upkeep_commands.trim_outbox(self.keys, handed_over)) if handed_over else 0

"""The API's job store: owns its Redis connection (connection/mux.py) and runs script calls
(scripts/) on it, each one FCALL of the scripts' function library against the deployment's
root (loading the library when Redis lacks it: scripts/functions.py). The blocking flavour
of the workers is sync_store.py."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import hiredis
import msgspec

from scheduler.config import Settings
from scheduler.models.job import STATUSES, Job, JobUpdate
from scheduler.models.record import record
from scheduler.models.registry import Node, NodeRegistration, Service
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement, live_node_ids
from scheduler.store import records
from scheduler.store.connection.mux import MuxRedis
from scheduler.store.connection.notify import Notifier, wait_until
from scheduler.store.connection.protocol import READ_COST, WRITE_COST, Reply, script_command
from scheduler.store.keys import Keys
from scheduler.store.pieces import MOVE_STEP, drained, retried, searched
from scheduler.store.schedule_calls import ScheduleCalls
from scheduler.store.scripts import Call, functions, jobs, listing, metrics
from scheduler.store.scripts import drains as drain_scripts

# Not `nodes`: the method JobStore.nodes (GET /nodes) would shadow it in the class body.
from scheduler.store.scripts import nodes as node_scripts
from scheduler.store.scripts import overview as overview_scripts
from scheduler.store.scripts import series as series_scripts
from scheduler.store.scripts import services as service_scripts
from scheduler.store.scripts.create import pass_key
from scheduler.store.scripts.jobs import NO_DEDUP, Created, Dedup
from scheduler.store.scripts.replies import Requeued
from scheduler.store.scripts.retry import Retried, RetryPolicy
from scheduler.store.shards import Numbering

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
# Jobs an id passing to a new holder hands back (more: the registration is refused).
DELETE_MOVES = 1000
SERIES_CHUNK = 60  # the dashboard's minutes one script reads (JobStore.series)
Moves = list[Requeued]  # (JobStore.list shadows the builtin in its class body)


@functools.lru_cache(maxsize=1024)
def _poll_command(keys: Keys, node_id: str, limit: int, caller: str) -> bytes:
    """The poll's FCALL, packed. An agent polls with the same node and token every few
    seconds, and building and packing the command was a third of a poll's Python time. What
    the cache holds decides nothing: the script checks the caller against Redis each time."""
    call = jobs.poll(node_id, limit, caller)
    command = script_command("FCALL", call.script.function, [keys.root], call.args)
    packed: bytes = hiredis.pack_command(command)
    return packed


class JobStore(ScheduleCalls):
    """Asyncio store for the API processes, on one multiplexed connection (connection/mux.py)."""

    def __init__(self, client: MuxRedis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.redis_prefix)
        # How this shard draws job and service numbers; a sharded store sets the floors.
        self.numbering = self.service_numbering = Numbering.served(settings)
        # Long-polls wait here, never on `client` (notify.py).
        self.notifier = Notifier(settings.redis_url, settings.redis_prefix)

    @property
    def notifiers(self) -> builtins.list[Notifier]:
        return [self.notifier]

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
        script = call.script
        replicas, timeout_ms = script.acks(self.settings)
        cost = READ_COST if script.read_only else WRITE_COST
        root = [self.keys.root]
        reply = await self.redis.fcall(
            script.function, functions.library().code, root, call.args, replicas, timeout_ms, cost
        )
        return call.parse(reply)

    async def create(
        self, job: Job, placement: Placement, now: float, dedup: Dedup = NO_DEDUP
    ) -> Created:
        """A new job (models.job.stamped), placed by `placement`."""
        ttl = self.settings.node_ttl_secs
        staged, call = records.creation(self.keys, job, placement, now, ttl, dedup, self.numbering)
        created = await self._after(staged, call)
        return await self._made_whole(created) if created.duplicate and created.job else created

    async def pass_key(self, dedup: Dedup) -> Created:
        """A keyed create's pass over this shard, which may not make its job (create.py
        PASS_KEY): the job the key made here (duplicate), IdempotencyMismatch for another
        request's, else NoHealthyNodes, the key marked as passed on."""
        created = await self.run(pass_key(dedup))
        return await self._made_whole(created) if created.job else created

    async def _made_whole(self, created: Created) -> Created:
        """A duplicate's job with its parts apart (a script answers its head)."""
        return dataclasses.replace(created, job=(await self.whole([created.job]))[0])

    async def _after(self, staged: records.Staged, call: Call[T]) -> T:
        """`call` run right behind the SETs of its staged parts (sent together)."""
        if not staged.values:
            return await self.run(call)
        sets = [
            self.redis.execute("SET", key, value, "EX", records.STAGED_SECS)
            for key, value in staged.values.items()
        ]
        *_, reply = await asyncio.gather(*sets, self.run(call))
        return reply  # type: ignore[no-any-return]

    async def whole(self, heads: builtins.list[bytes]) -> builtins.list[bytes]:
        """The records of heads a script answered, with the parts they keep apart (one MGET
        for them all, only when one does: models/record.py)."""
        places, wanted = records.apart_keys(self.keys, heads)
        values = await self.redis.execute("MGET", *wanted) if places else []
        return records.complete(heads, places, values)

    async def pick(self, placement: Placement, now: float) -> str:
        return await self.run(listing.pick_node(placement, now, self.settings.node_ttl_secs))

    async def poll(self, node_id: str, caller: str) -> jobs.Polled:
        limit = self.settings.max_jobs_per_node
        polled = await self.run(jobs.poll(node_id, limit, caller))
        polled.jobs = await self.whole(polled.jobs)
        return polled

    def send_poll(self, node_id: str, caller: str) -> Sending[jobs.Polled] | None:
        """`poll` sent at once, for a caller that goes on in a callback (the hot lane): its
        Reply and how to read it, or None with no connection open yet (await `poll`).
        The reply fails with NoScriptError when Redis forgot the script, which `poll` loads.
        (A read: never a WAIT for replicas.)"""
        limit = self.settings.max_jobs_per_node
        sent = self.redis.send_packed(_poll_command(self.keys, node_id, limit, caller))
        return None if sent is None else (sent, records.polled_whole)

    async def poll_wait(self, node_id: str, caller: str, wait: float) -> jobs.Polled:
        """The poll, answered once the node has work (or a job to cancel) or after `wait`
        seconds; at once, as a plain poll, for a node no registry lists: in open mode anyone
        may poll any id, and a held request (its subscription) costs memory per made-up id."""
        channel = self.keys.node_channel(node_id)
        if not await self.run(node_scripts.registered(node_id, self.settings.builtin_registry)):
            wait = 0
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
        """A page of jobs (scripts.listing.LIST)."""
        if status and status not in STATUSES:
            return []
        budget = self.settings.max_page_bytes
        call = listing.list_jobs(node_id, status, bound, limit, budget, newest)
        return await self.whole((await self.run(call)).jobs)

    async def counts(self, node_id: str) -> builtins.list[int]:
        """[all jobs, then each status's] of `node_id`'s jobs ("": every node's)."""
        return await self.run(listing.counts(node_id, STATUSES))

    async def search(
        self, node_id: str, status: str, bound: int, needle: str, scan: int, limit: int
    ) -> listing.Found:
        """The UI's search (scripts.listing.SEARCH, in pieces: search.py), its jobs' records
        whole."""
        budget = self.settings.max_page_bytes
        found = await searched(self.run, node_id, status, bound, needle, scan, limit, budget)
        return dataclasses.replace(found, jobs=await self.whole(found.jobs))

    async def live_compute(self, now: float) -> int:
        """How many compute nodes are live (heard from within NODE_TTL_SECS)."""
        cutoff = now - self.settings.node_ttl_secs
        live: int = await self.redis.execute("ZCOUNT", self.keys.nodes_compute, cutoff, "+inf")
        return live

    async def attempts(self, job_id: str) -> builtins.list[bytes]:
        """The job's ended attempts, oldest first (scripts.listing.ATTEMPTS)."""
        return await self.run(listing.attempts(job_id))

    async def get(self, job_id: str) -> bytes | None:
        """The job's record (models/record.py: its parts, one MGET), None when it is not."""
        return record(await self.redis.execute("MGET", *records.job_parts(self.keys, job_id)))

    def send_get(self, job_id: str) -> Reply | None:
        """`get` sent at once (as `send_poll`); its reply is read by models.record.record."""
        return self.redis.send_now("MGET", *records.job_parts(self.keys, job_id))

    async def _changed(self, call: Call[bytes]) -> bytes:
        """A script that changes a job and answers its head, made whole."""
        return (await self.whole([await self.run(call)]))[0]

    async def report(self, job_id: str, update: JobUpdate, now: float, caller: str) -> bytes:
        s = self.settings
        policy, ttl, builtin = RetryPolicy.of(s), s.node_ttl_secs, s.builtin_registry
        staged = records.stage(self.keys, records.large_outputs(update))
        call = jobs.transition(job_id, update, now, policy, caller, ttl, builtin, staged.tokens)
        return (await self.whole([await self._after(staged, call)]))[0]

    async def check_report(self, job_id: str, caller: str) -> None:
        """Raises as `report` would for an unknown job or a caller that may not report on it."""
        await self.run(jobs.check_report(job_id, caller))

    async def overview(self) -> overview_scripts.Overview:
        return await overview_scripts.overview(self.run, STATUSES)

    async def series(self, first: int, count: int) -> builtins.list[series_scripts.Minute]:
        """The dashboard's `count` minutes from minute number `first` (models/series.py): a
        script per hour, sent together (one round trip), so the day's 1440 minutes (~7 ms of
        Redis) never hold Redis for more than an hour's (~0.3 ms) at a time."""
        hours = [
            self.run(series_scripts.read_series(start, min(SERIES_CHUNK, first + count - start)))
            for start in range(first, first + count, SERIES_CHUNK)
        ]
        return [minute for hour in await asyncio.gather(*hours) for minute in hour]

    async def keep_series(self) -> None:
        """SERIES_RETENTION_SECS where the scripts setting a minute's expiry read it."""
        keep = str(int(self.settings.series_retention_secs))
        await self.redis.execute("SET", self.keys.series_retention, keep)

    async def add_request_stats(self, deltas: dict[str, float], read: bool) -> dict[str, float]:
        """Adds this process's request metrics since its last call to the deployment's; with
        `read`, returns the deployment's sums."""
        return await self.run(metrics.add_request_stats(deltas, read))

    # The built-in registry (REGISTRY_URL unset).

    async def create_service(self, service: Service, caller: str) -> bytes:
        call = service_scripts.create_service(
            service.node_id,
            msgspec.json.encode(service),
            caller,
            MAX_SERVICES,
            MAX_SERVICES_PER_NODE,
            self.service_numbering,
        )
        return await self.run(call)

    async def service(self, service_id: str) -> bytes | None:
        blob: bytes | None = await self.redis.execute("HGET", self.keys.services, service_id)
        return blob

    async def set_service_status(self, service_id: str, status: str, caller: str) -> None:
        await self.run(service_scripts.set_service_status(service_id, status, caller))

    async def services(self, node_id: str, status: str, caller: str) -> builtins.list[bytes]:
        return await self.run(service_scripts.list_services(node_id, status, caller))

    async def register_node(
        self, reg: NodeRegistration, now: float, who: node_scripts.Registration, token_hash: str
    ) -> tuple[Node, node_scripts.Registered]:
        """The node as registered, what became of the token and the jobs handed back
        (scripts.nodes.register_node)."""
        node = Node(
            id=reg.id,
            hostname=reg.hostname,
            addr=reg.addr,
            cpu_count=reg.cpu_count,
            role=reg.role or "compute",
            memory_mb=reg.memory_mb,
            labels=reg.labels,
        )
        node_json = msgspec.json.encode(node)
        call = node_scripts.register_node(
            node.id, node_json, node.role, now, who, token_hash, DELETE_MOVES
        )
        registered = await self.run(call)
        return msgspec.structs.replace(node, status="healthy", last_seen=rfc3339(now)), registered

    async def heartbeat(
        self, node_id: str, now: float, caller: str
    ) -> tuple[Node, builtins.list[str]]:
        """The node, and the ids of its jobs being cancelled."""
        vouched = node_scripts.vouches(caller, self.settings.api_key)
        call = node_scripts.heartbeat(node_id, now, caller, self.settings.node_ttl_secs, vouched)
        blob, cancels = await self.run(call)
        node = _node_decoder.decode(blob)
        return msgspec.structs.replace(node, status="healthy", last_seen=rfc3339(now)), cancels

    async def check_node_caller(self, node_id: str, caller: str) -> None:
        """Raises unless `caller` is the key or the node's own token (node_scripts)."""
        await self.run(node_scripts.node_caller(node_id, caller))

    async def cancel(self, job_id: str, now: float) -> bytes:
        return await self._changed(jobs.cancel_job(job_id, now))

    async def retry(
        self, job_ids: builtins.list[str], placement: Placement, now: float
    ) -> builtins.list[Retried]:
        """Failed jobs started over (scripts.retry.RETRY_JOBS), placed as new jobs are: in
        calls of bounded work (pieces.py)."""
        ttl = self.settings.node_ttl_secs
        done = await retried(self.run, job_ids, placement, now, ttl)
        heads = await self.whole([r.job for r in done if r.job])
        whole = dict(zip([r.job_id for r in done if r.job], heads, strict=True))
        return [dataclasses.replace(r, job=whole.get(r.job_id, r.job)) for r in done]

    async def delete_node(self, node_id: str, now: float, caller: str) -> Moves:
        """Deregister a node; its pending jobs move to live nodes (the first MOVE_STEP here,
        any others at the next sweep: pieces.py)."""
        ttl = self.settings.node_ttl_secs
        call = node_scripts.delete_node(node_id, now, ttl, MOVE_STEP, caller)
        return await self.run(call)

    async def drain_node(
        self, node_id: str, now: float, by: str = "operator", *, caller: str = "key",
        listed: bool = False,
    ) -> drain_scripts.Drained:  # fmt: skip
        """Drain a node (scripts.drains.DRAIN_NODE): nothing new goes to it or starts there,
        its jobs not running move to other nodes (the first DRAIN_MOVES, in calls of
        MOVE_STEP: pieces.py; a drain again moves more). `listed`: the external registry
        lists it (REGISTRY_URL)."""
        ttl = self.settings.node_ttl_secs
        return await drained(self.run, node_id, by, caller, listed, now, ttl)

    async def undrain_node(
        self, node_id: str, *, caller: str = "key", listed: bool = False
    ) -> bool:
        """Lift a node's drain; whether it was drained."""
        return await self.run(drain_scripts.undrain_node(node_id, caller, listed))

    async def drains(self) -> dict[str, str]:
        """The drained nodes: id -> who drained it ("operator" or "stopping")."""
        flat = await self.redis.execute("HGETALL", self.keys.drained_nodes)
        return {str(flat[i], "utf-8"): str(flat[i + 1], "utf-8") for i in range(0, len(flat), 2)}

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

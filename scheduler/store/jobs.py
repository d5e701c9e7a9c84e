"""The API's job store: the asyncio executor of store operations (operation.py, store/ops/)
over the deployment's shards, one multiplexed connection each (connection/mux.py; one shard
unsharded). It routes each operation by its declaration: a job's to the shard its id names,
a node's to the node's, `Each` to every shard at once (merged), `Placed` through the shards
in turn (shard_placement.py), the deployment's own to shard 0. A script call is one FCALL of
the scripts' function library against the shard's root (loading the library when Redis lacks
it: scripts/functions.py). The blocking executor of the workers is sync_store.py."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import hiredis

from scheduler.config import Settings
from scheduler.store import records
from scheduler.store.connection.mux import MuxRedis
from scheduler.store.connection.notify import Notifier, wait_until
from scheduler.store.connection.protocol import READ_COST, WRITE_COST, Reply, script_command
from scheduler.store.driving import Driven, merge_each, read_step, tolerated
from scheduler.store.keys import Keys
from scheduler.store.operation import (
    All,
    Command,
    Each,
    Home,
    OfJob,
    OfNode,
    OfService,
    OnShard,
    Op,
    Placed,
    PlacedEach,
    Route,
    Shard,
    Step,
    Together,
    call_op,
)
from scheduler.store.ops import jobs as job_ops
from scheduler.store.ops import nodes as node_ops
from scheduler.store.scripts import Call, functions
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.shard_layout import ShardLayout
from scheduler.store.shard_placement import ShardPlacement
from scheduler.store.shards import Numbering

T = TypeVar("T")


@functools.lru_cache(maxsize=1024)
def _poll_command(
    keys: Keys, poller: job_scripts.Poller, limit: int, steal: bool, builtin: bool
) -> bytes:
    """The poll's FCALL, packed. An agent polls with the same node and token every few
    seconds, and building and packing the command was a third of a poll's Python time. What
    the cache holds decides nothing: the script checks the caller against Redis each time."""
    call = job_scripts.poll(poller, limit, steal, builtin)
    command = script_command("FCALL", call.script.function, [keys.root], call.args)
    packed: bytes = hiredis.pack_command(command)
    return packed


class ShardClient:
    """One shard: its connection, what its operations' programs are given (`here`), and its
    notifier (long-polls wait there, never on the connection: notify.py)."""

    def __init__(self, redis: MuxRedis, settings: Settings, index: int = 0) -> None:
        self.redis, self.settings = redis, settings
        self.keys = Keys(settings.redis_prefix)
        numbering = Numbering.served(settings)
        self.here = Shard(settings, self.keys, index, numbering=numbering)
        self.here.service_numbering = numbering
        self.notifier = Notifier(settings.redis_url, settings.redis_prefix)

    @classmethod
    def connect(cls, settings: Settings, index: int = 0) -> ShardClient:
        # A WAIT may hold a reply for its whole timeout: the stall watchdog must outlast it.
        timeout = max(10.0, 2 * settings.redis_replicas_ack_timeout_ms / 1000)
        redis = MuxRedis(settings.redis_url, timeout=timeout, prefix=settings.redis_prefix)
        return cls(redis, settings, index)

    async def call(self, call: Call[T]) -> T:
        script = call.script
        replicas, timeout_ms = script.acks(self.settings)
        cost = READ_COST if script.read_only else WRITE_COST
        reply = await self.redis.fcall(
            script.function,
            functions.library().code,
            [self.keys.root],
            call.args,
            replicas,
            timeout_ms,
            cost,
        )
        return call.parse(reply)

    async def step(self, step: Call[Any] | Command | Together) -> Any:
        if isinstance(step, Command):
            return await self.redis.execute(*step.args)
        if isinstance(step, Together):
            return await self._together(step)
        return await self.call(step)

    async def _together(self, step: Together) -> list[Any]:
        """The steps queued at once (MuxRedis.pipelined: no task each, a thousand creates of
        a bulk submit among them), each call's reply read by its script; the first error
        raised, or with `tolerant` each step's its reply. Calls that wait for replicas go
        each its own way (fcall: a WAIT behind its write)."""
        if any(isinstance(s, Call) and s.script.acks(self.settings)[0] for s in step.steps):
            sent = (self.step(s) for s in step.steps)
            replies = await asyncio.gather(*sent, return_exceptions=step.tolerant)
            return tolerated(list(replies))
        commands = [
            s.args
            if isinstance(s, Command)
            else script_command("FCALL", s.script.function, [self.keys.root], s.args)
            for s in step.steps
        ]
        replies = await self.redis.pipelined(commands, functions.library().code)
        done = [read_step(s, reply) for s, reply in zip(step.steps, replies, strict=True)]
        if not step.tolerant:
            failed = next((reply for reply in done if isinstance(reply, Exception)), None)
            if failed is not None:
                raise failed
        return tolerated(done)

    async def aclose(self) -> None:
        await self.notifier.aclose()
        await self.redis.aclose()


class JobStore:
    """The API's store: `run(op)` runs a declared operation (store/ops/) where it routes."""

    def __init__(self, client: MuxRedis | list[ShardClient], settings: Settings) -> None:
        self.shards = client if isinstance(client, list) else [ShardClient(client, settings)]
        self.settings = settings
        # The deployment's own (shard 0's): sessions, logins, schedules.
        self.redis, self.keys = self.shards[0].redis, self.shards[0].keys
        self.where = ShardLayout(self.shards)
        self.placement = ShardPlacement(self.shards, self.where, self.on_shard)

    @classmethod
    def connect(cls, settings: Settings) -> JobStore:
        if settings.shards == 1:
            return cls([ShardClient.connect(settings)], settings)
        count = settings.shards
        return cls([ShardClient.connect(settings.for_shard(k), k) for k in range(count)], settings)

    @property
    def notifiers(self) -> list[Notifier]:
        return [shard.notifier for shard in self.shards]

    async def start(self) -> None:
        """A sharded deployment's layout read (shard_layout.py), at the app's start; else on
        first use."""
        if len(self.shards) > 1:
            await self.where.ready()

    async def aclose(self) -> None:
        await asyncio.gather(*(shard.aclose() for shard in self.shards))

    async def run(self, op: Op[T] | Call[T]) -> T:
        """The operation's value, run where its route says (a lone script call: shard 0)."""
        if isinstance(op, Call):
            op = call_op(op)
        if len(self.shards) == 1 and not (isinstance(op.route, Each) and op.route.tolerant):
            # Unsharded, every route leads to shard 0: a Placed op's program is its whole
            # placement's, an Each's one value is its value (a tolerant one's error too).
            return await self.on_shard(0, op)
        return await self._routed(op.route, op)  # type: ignore[no-any-return]

    async def _routed(self, route: Route, op: Op[Any]) -> Any:
        if isinstance(route, Home):
            return await self.on_shard(0, op)
        if isinstance(route, OnShard):
            return await self.on_shard(route.index, op)
        if isinstance(route, Each):
            values = await asyncio.gather(
                *(self.on_shard(k, op) for k in range(len(self.shards))),
                return_exceptions=route.tolerant,
            )
            return merge_each(route, list(values))
        if isinstance(route, Placed):
            return await self._placed(route)
        if isinstance(route, PlacedEach):
            return await self.placement.placed_each(route.items)
        return await self.on_shard(await self.shard_of(route), op)

    async def shard_of(self, route: OfJob | OfNode | OfService) -> int:
        if len(self.shards) == 1:
            return 0
        where = await self.where.ready()
        if isinstance(route, OfJob):
            return where.job_shard(route.job_id)
        if isinstance(route, OfNode):
            return where.node_shard(route.node_id)
        return where.service_shard(route.service_id)

    async def _placed(self, route: Placed) -> Any:
        if route.dedup is not None and route.dedup.key:
            return await self.placement.keyed(route.job, route.placement, route.dedup, route.make)
        return await self.placement.placed(route.job, route.placement, route.make)

    async def on_shard(self, index: int, op: Op[T]) -> T:
        """`op`'s program driven on shard `index` (the operations it yields routed anew)."""
        if len(self.shards) > 1:
            await self.where.ready()
        shard = self.shards[index]
        driven = Driven(op.program(shard.here))
        step = driven.first()
        while not driven.done:
            try:
                reply = await self._step(shard, step)
            except Exception as exc:  # the program's to handle, or to let through
                step = driven.fail(exc)
            else:
                step = driven.next(reply)
        return driven.value  # type: ignore[return-value]

    async def _step(self, shard: ShardClient, step: Step) -> Any:
        if isinstance(step, Op):
            return await self.run(step)
        if isinstance(step, All):
            return list(await asyncio.gather(*(self.run(op) for op in step.ops)))
        return await shard.step(step)

    # Sent without a coroutine, for the hot lane (api/lane.py), and the long-polls' waits.

    def send_poll(self, poller: job_scripts.Poller) -> tuple[Reply, Any] | None:
        """The poll sent at once, for a caller that goes on in a callback (the hot lane): its
        Reply and how to read it, or None with no connection open yet or the layout not read
        (then await `run(poll(...))`). The reply fails with NoScriptError when Redis forgot
        the script, which the awaited poll loads. (A read: never a WAIT for replicas.)"""
        if len(self.shards) > 1 and not self.where.started:
            return None
        if self.settings.redis_min_replicas_acked:
            return None  # a poll may write (a steal): it waits for the replicas' acks
        node_id = poller.node_id
        shard = self.shards[self.where.node_shard(node_id) if len(self.shards) > 1 else 0]
        limit, steal = self.settings.max_jobs_per_node, self.settings.steals
        command = _poll_command(shard.keys, poller, limit, steal, self.settings.builtin_registry)
        sent = shard.redis.send_packed(command)
        return None if sent is None else (sent, records.polled_whole)

    def send_get(self, job_id: str) -> Reply | None:
        """The job's record sent at once (as `send_poll`); models.record.record reads it."""
        if len(self.shards) > 1 and not self.where.started:
            return None
        shard = self.shards[self.where.job_shard(job_id) if len(self.shards) > 1 else 0]
        return shard.redis.send_now("MGET", *records.job_parts(shard.keys, job_id))

    async def client_of_job(self, job_id: str) -> ShardClient:
        """The shard of `job_id`: its connection, keys and notifier (a follower waits there)."""
        return self.shards[await self.shard_of(OfJob(job_id))]

    async def poll_wait(self, poller: job_scripts.Poller, wait: float) -> job_scripts.Polled:
        """The poll, answered once the node has work (or a job to cancel) or after `wait`
        seconds; at once, as a plain poll, for a node no registry lists: in open mode anyone
        may poll any id, and a held request (its subscription) costs memory per made-up id.
        With work stealing, a queue left waiting anywhere wakes it too (its check may take)."""
        node_id = poller.node_id
        shard = self.shards[await self.shard_of(OfNode(node_id))]
        channels = [shard.keys.node_channel(node_id)]
        if self.settings.steals:
            channels.append(shard.keys.backlog_channel)
        if not await self.run(node_ops.registered(node_id)):
            wait = 0
        poll = job_ops.poll(poller)
        return await wait_until(shard.notifier, channels, lambda: self.run(poll), bool, wait)

    async def get_wait(
        self,
        job_id: str,
        status_not: str,
        wait: float,
        seen: Callable[[bytes], bool] | None = None,
    ) -> bytes | None:
        """The job, answered once its status is not `status_not` (without one: once it
        differs from what it was), when it does not exist, or after `wait` seconds. A job
        `seen` refuses (another namespace's: its caller may not see it) is answered as one
        that does not exist, at once (None); its namespace never changes, so the first read
        decides."""
        get = job_ops.get(job_id)
        first = await self.run(get)
        if first is not None and seen is not None and not seen(first):
            return None
        done = job_ops.waited(first, status_not)
        if done(first) and (status_not or first is None):
            return first
        shard = self.shards[await self.shard_of(OfJob(job_id))]
        channel = shard.keys.job_channel(job_id)
        return await wait_until(shard.notifier, channel, lambda: self.run(get), done, wait)

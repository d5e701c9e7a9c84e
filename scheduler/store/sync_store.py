"""The blocking job store of the rq workers, the snapshot and the command line: the blocking
executor of store operations (operation.py, store/ops/) on the one shard a process serves,
with a redis-py client (connection/blocking.py); each script call against the shard's root.
The API's asyncio executor, over every shard, is jobs.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import redis
from redis.exceptions import ResponseError

from scheduler.config import Settings
from scheduler.store.connection.blocking import sync_client
from scheduler.store.connection.protocol import is_no_function
from scheduler.store.driving import Driven, read_step
from scheduler.store.errors import ReplicasNotAcked
from scheduler.store.keys import Keys
from scheduler.store.operation import All, Command, Op, Shard, Step, Together
from scheduler.store.scripts import Call, functions
from scheduler.store.shards import Numbering

T = TypeVar("T")


class SyncJobStore:
    """Blocking store for the rq workers and the command line."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.redis_prefix)
        numbering = Numbering.served(settings)
        self.here = Shard(settings, self.keys, settings.shard, numbering=numbering)

    @classmethod
    def connect(cls, settings: Settings) -> SyncJobStore:
        return cls(sync_client(settings), settings)

    def close(self) -> None:
        self.redis.close()

    def run(self, op: Op[T] | Call[T]) -> T:
        """The operation's value, on this process's shard: it serves one, so every route
        leads here (an `Each` is this shard's value, a `Placed` the whole placement's)."""
        if isinstance(op, Call):
            return self.call(op)
        driven = Driven(op.program(self.here))
        step = driven.first()
        while not driven.done:
            try:
                reply = self._step(step)
            except Exception as exc:  # the program's to handle, or to let through
                step = driven.fail(exc)
            else:
                step = driven.next(reply)
        return driven.value  # type: ignore[return-value]

    def _step(self, step: Step) -> Any:
        if isinstance(step, Op):
            return self.run(step)
        if isinstance(step, All):
            return [self.run(each) for each in step.ops]
        if isinstance(step, Command):
            return self.redis.execute_command(*step.args)  # type: ignore[no-untyped-call]
        if isinstance(step, Together):
            return self._together(step)
        return self.call(step)

    def _together(self, step: Together) -> list[Any]:
        """Every step in one pipeline (one round trip), a script as its FCALL; the calls whose
        function this Redis lacked sent again once the library is loaded. Each reply read
        (a call's by its script); the first error raised, or with `tolerant` each step's
        error its reply."""
        steps = step.steps
        replies = self._piped(steps)
        missing = [i for i, r in enumerate(replies) if is_no_function(r)]
        if missing:
            self.redis.function_load(functions.library().code, replace=True)
            for i, reply in zip(missing, self._piped([steps[i] for i in missing]), strict=True):
                replies[i] = reply
        done = [read_step(s, reply) for s, reply in zip(steps, replies, strict=True)]
        if not step.tolerant:
            failed = next((reply for reply in done if isinstance(reply, Exception)), None)
            if failed is not None:
                raise failed
        return done

    def _piped(self, steps: Sequence[Call[Any] | Command]) -> list[Any]:
        """The steps' raw replies from one pipeline, an error as its reply; with
        REDIS_MIN_REPLICAS_ACKED, one WAIT after them all (a call short of its replicas
        answers ReplicasNotAcked)."""
        pipe = self.redis.pipeline(transaction=False)
        replicas, timeout_ms = 0, 0
        for s in steps:
            if isinstance(s, Command):
                pipe.execute_command(*s.args)  # type: ignore[no-untyped-call]
                continue
            wanted, ms = s.script.acks(self.settings)
            replicas, timeout_ms = max(replicas, wanted), max(timeout_ms, ms)
            pipe.fcall(s.script.function, 1, self.keys.root, *s.args)
        if replicas:
            pipe.wait(replicas, timeout_ms)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        if not replicas:
            return replies
        acked = replies.pop()
        for i, s in enumerate(steps):
            wanted = 0 if isinstance(s, Command) else s.script.acks(self.settings)[0]
            if wanted and not isinstance(replies[i], Exception):
                if isinstance(acked, Exception):
                    replies[i] = acked
                elif acked < wanted:
                    replies[i] = ReplicasNotAcked(acked, wanted)
        return replies

    def call(self, call: Call[T]) -> T:
        """The call as a FCALL of the scripts' function library (scripts/functions.py),
        loaded first when this Redis lacks it; with REDIS_MIN_REPLICAS_ACKED, a WAIT for
        the replicas in the same round trip (no MULTI: WAIT may not run inside one)."""
        try:
            reply = self._fcall(call)
        except ResponseError as exc:
            if not is_no_function(exc):
                raise
            self.redis.function_load(functions.library().code, replace=True)
            reply = self._fcall(call)
        return call.parse(reply)

    def _fcall(self, call: Call[T]) -> Any:
        script = call.script
        replicas, timeout_ms = script.acks(self.settings)
        if not replicas:
            return self.redis.fcall(script.function, 1, self.keys.root, *call.args)
        pipe = self.redis.pipeline(transaction=False)
        pipe.fcall(script.function, 1, self.keys.root, *call.args)
        pipe.wait(replicas, timeout_ms)
        # Not raised by execute: it rewrites an error's text ("Command # 1 ... of pipeline
        # caused error: ..."), and `run` must read a missing function's.
        reply, acked = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            raise acked
        if acked < replicas:
            raise ReplicasNotAcked(acked, replicas)
        return reply

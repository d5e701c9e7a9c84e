"""The names of the layout before the hash tag ("P:..." and rq's default "rq:..."), which only
the upgrade (store/migrate.py, workers/rq_migrate.py) reads; keys.py names the current ones."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.store.keys import Keys, glob_escape


@dataclass(frozen=True, slots=True)
class LegacyKeys:
    """The names of the layout before the hash tag ("P:..." and rq's default "rq:..."), which
    only the upgrade (store/migrate.py, workers/rq_migrate.py) reads."""

    prefix: str

    @property
    def root(self) -> str:
        return f"{self.prefix}:"

    @property
    def initialised(self) -> str:
        return f"{self.root}initialised"

    def pattern(self) -> str:
        return glob_escape(self.root) + "*"

    def owns(self, key: str) -> bool:
        """Whether old key `key` is this deployment's (prefix "P:x" had keys "P:x:...")."""
        return key.removeprefix(self.root).split(":", 1)[0] in LAYOUT_ROOTS

    def of(self, key: str, new: Keys) -> str:
        """The old name of the new key `key`."""
        return self.root + key.removeprefix(new.root)

    def renamed(self, key: str, new: Keys) -> str:
        """The new name of the old key `key` (which starts with this root)."""
        return new.root + key.removeprefix(self.root)

    @staticmethod
    def rq_prefix() -> str:
        return LEGACY_RQ_PREFIX

    @staticmethod
    def rq(kind: str, name: str) -> str:
        """One of rq's old keys: rq:queue:<queue>, rq:job:<id>, rq:scheduled:<queue>, ..."""
        return f"{LEGACY_RQ_PREFIX}:{kind}:{name}"

    @staticmethod
    def rq_queues() -> str:
        return f"{LEGACY_RQ_PREFIX}:queues"

    @staticmethod
    def rq_workers(queue: str) -> str:
        """rq's set of the workers on `queue`: each a worker's hash key (rq:worker:<name>),
        alive while the worker is (its TTL) and given a `death` field when it stops."""
        return f"{LEGACY_RQ_PREFIX}:workers:{queue}"

    @staticmethod
    def rq_work(queue: str) -> list[str]:
        """rq's keys that hold work of `queue`: the queue, the list of jobs a worker popped
        (rq/intermediate_queue.py) and the registries (the started ones in `wip`)."""
        old_queue = LegacyKeys.rq("queue", queue)
        registries = [LegacyKeys.rq(kind, queue) for kind in (*RQ_REGISTRIES, RQ_STARTED)]
        return [old_queue, f"{old_queue}:intermediate", *registries]

    def channels(self) -> str:
        """PUBSUB pattern of the old layout's wake-ups (an old API's long-polls wait there)."""
        return glob_escape(self.root) + "wake:*"


# The first part of every key after the root (the layout above, rq's aside): the upgrade
# renames old keys with these only.
LAYOUT_ROOTS = frozenset(
    {
        "seq", "job", "jobs", "status", "node", "deadlines", "finished", "cancelling", "dirty",
        "initialised", "restoring", "outbox", "nodes", "services", "tokens", "registry", "sqs",
        "submit", "lock", "stats", "runs", "delayed", "schedules", "attempts", "waiting",
        "dependents", "ui", "authfail", "series", "series-retention", "label", "unplaced",
        "records", "staged", "shards", "endings", "libraries", "log", "events", "apikeys",
        "audit", "ns", "namespaces",
    }
)  # fmt: skip

# rq's RQ_KEY_PREFIX default, which the old layout ran with.
LEGACY_RQ_PREFIX = "rq"
# rq's registries (rq/registry.py) whose jobs keep their place and score when moved, and the
# one of started jobs (members "<job id>:<execution id>").
RQ_REGISTRIES = ("scheduled", "failed", "finished", "canceled", "deferred")
RQ_STARTED = "wip"

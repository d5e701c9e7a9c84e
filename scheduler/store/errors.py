"""What a script's refusal becomes in Python: the exceptions its reply reader raises, and
ReplicasNotAcked, a write the replicas did not confirm. The API turns each into its HTTP
answer (api/errors.py)."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError


class JobNotFound(LookupError):
    def __str__(self) -> str:
        return "job not found"


class NodeNotFound(LookupError):
    def __str__(self) -> str:
        return "node not found"


class NodeNotRegistered(NodeNotFound):
    """A node's own call (POST /services) for an id no node registered."""

    def __str__(self) -> str:
        return "node not registered: register it (POST /nodes/register) first"


class ServiceNotFound(LookupError):
    def __str__(self) -> str:
        return "not found"  # the original registry's text


class ScheduleNotFound(LookupError):
    def __str__(self) -> str:
        return "schedule not found"


class TooManySchedules(Exception):
    def __str__(self) -> str:
        return "too many schedules (MAX_SCHEDULES)"


class Conflict(Exception):
    """A report the state machine refuses; the message is the API's 409 text."""


class KeyNotFound(LookupError):
    def __str__(self) -> str:
        return "key not found"


class OffsetMismatch(Conflict):
    """A chunk of live output sent past what the log holds of its stream: `offset` is where
    the next one must start (the agent sends from there)."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"output offset mismatch: send from offset {offset}")
        self.offset = offset


class JobNotRunning(LookupError):
    """Live output for a job that is not running on the node that sends it (it ended, was
    moved, or is another node's): the agent stops sending it."""

    def __str__(self) -> str:
        return "job not running on this node"


class IdempotencyMismatch(Exception):
    """An Idempotency-Key used again with another request body: nothing was created."""

    def __str__(self) -> str:
        return "Idempotency-Key already used with another request"


class Unauthorized(Exception):
    """An agent call without a valid node token or the API key (AGENT_AUTH=token)."""

    def __str__(self) -> str:
        return "unauthorized"


class Forbidden(Exception):
    """A valid node token used on another node, or a change it does not allow."""

    def __init__(self, message: str = "forbidden: the node token is for another node") -> None:
        super().__init__(message)


class TooManyNodes(Exception):
    """MAX_NODES nodes are registered; the operator deletes some first."""

    def __str__(self) -> str:
        return "too many nodes registered (MAX_NODES)"


class TooManyServices(Exception):
    def __str__(self) -> str:
        return "too many services registered"


class StoreNotReady(Exception):
    """Redis holds no restore marker: it lost its data and the snapshot is not back yet."""

    def __str__(self) -> str:
        return "store not ready: restoring from the snapshot"


class PartsApart(Exception):
    """A reply read in a callback (the hot lane's poll) holds a job that keeps parts apart
    (models/record.py), which only a second read gets: the caller runs the coroutine path."""


class StagedPartLost(Exception):
    """A large part of a job's record, staged for a script (models/record.py), was gone when
    the script ran (it expired, or Redis lost it): nothing was changed; the request may be
    sent again."""

    def __str__(self) -> str:
        return "a large part of the request was lost on its way into Redis: try again"


class ReplicasNotAcked(RedisConnectionError):
    """Fewer replicas than REDIS_MIN_REPLICAS_ACKED confirmed a change in time. The change
    may well have been applied on the primary: only its survival of a failover is unsure."""

    def __init__(self, acked: int, wanted: int) -> None:
        super().__init__(
            f"store unavailable: {acked} of {wanted} replicas acknowledged the change in time"
            " (REDIS_MIN_REPLICAS_ACKED); it may have been applied"
        )
        self.acked = acked
        self.wanted = wanted


class LayoutChanged(RuntimeError):
    """SCHEDULER_SHARDS is not the shard count the deployment was first started with."""

    def __init__(self, configured: int, recorded: int) -> None:
        super().__init__(
            f"SCHEDULER_SHARDS is {configured}, but this deployment was started with {recorded} "
            "shard(s); changing the count is not supported (docs/ARCHITECTURE.md, Shards)"
        )


class OverQuota(Exception):
    """A submit its namespace's quota refuses (docs/GUIDE.md, Quotas): it holds as many jobs
    pending, delayed or waiting as its quota allows, or the job asks more cpus or memory_mb
    than the quota lets the namespace run at once. Nothing was made (429)."""

    def __init__(self, namespace: str, what: str, limit: int, count: int) -> None:
        shown = namespace or "default"
        if what == "pending":
            text = (
                f"over quota: namespace {shown!r} holds {count} pending jobs (pending, delayed "
                f"or waiting) and its quota allows {limit}; nothing was made"
            )
        else:
            text = (
                f"over quota: the job asks {count} {what} and the quota of namespace {shown!r} "
                f"allows {limit} {what} running at once; nothing was made"
            )
        super().__init__(text)
        self.namespace, self.what, self.limit, self.count = namespace, what, limit, count

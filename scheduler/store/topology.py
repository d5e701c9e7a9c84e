"""Where the Redis of REDIS_URL is right now, and blocking clients that follow it.

REDIS_URL names one Redis (`redis://`, `rediss://`, `unix://`), the primary of a Sentinel
service (`redis+sentinel://`) or a Redis Cluster (`redis+cluster://`); config.parse_redis_url
reads it. Every key of a deployment carries the hash tag `{REDIS_PREFIX}`, so on a cluster
they all live in one slot and one connection to that slot's primary serves everything.

A connection resolves its address when it connects, never per command: Sentinel's current
primary (checked with ROLE), or the cluster node owning the tag's slot. A reply saying the
node is not (or no longer) the one to talk to (`TOPOLOGY_ERRORS`) drops the connection and
reaches the caller as a ConnectionError, the error a lost connection raises: the API turns it
into 503, the workers wait it out (workers.outage), and the next connect resolves afresh.

The API's multiplexed connection (redis_mux) resolves the same way on its own socket; the
blocking clients here are redis-py's (the rq workers, the snapshot, the command line).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ReadOnlyError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.sentinel import Sentinel, SentinelManagedConnection

from scheduler.config import ClusterRedis, DirectRedis, SentinelRedis, Settings
from scheduler.store.keys import Keys

# Replies from a node that is not the one to talk to now: a cluster slot moved or is being
# moved (MOVED, ASK), a primary demoted (READONLY), a cluster or replica without its primary
# (CLUSTERDOWN, MASTERDOWN, TRYAGAIN), a node still loading its data (LOADING). None of them
# ran the command.
TOPOLOGY_ERRORS = frozenset(
    ("MOVED", "ASK", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN")
)
# redis-py's classes of the same replies (LOADING is already a ConnectionError there).
_TOPOLOGY_EXCEPTIONS = (AskError, ReadOnlyError, ClusterDownError, TryAgainError)

# Sentinels and cluster seeds are asked with these bounds: a dead one must not hold up the
# question to the next.
DISCOVERY_TIMEOUT_SECS = 1.0


class NotPrimary(RedisConnectionError):
    """The node answered that it is not where this deployment's keys are written now."""


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


def is_topology_error(message: str) -> bool:
    return message.split(" ", 1)[0] in TOPOLOGY_ERRORS


def tag_slot(prefix: str) -> int:
    """The cluster slot of every key of the deployment with this REDIS_PREFIX."""
    return key_slot(Keys(prefix).tag.encode())


def slot_owner(slots: Any, slot: int, asked: str) -> tuple[str, int] | None:
    """The primary serving `slot` in a CLUSTER SLOTS reply (from node `asked`)."""
    for entry in slots:
        start, end, primary = int(entry[0]), int(entry[1]), entry[2]
        if start <= slot <= end:
            host = _text(primary[0])
            # An empty or "?" endpoint means "the address you reached me on".
            return (host if host not in ("", "?") else asked), int(primary[1])
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def sync_client(settings: Settings, **options: Any) -> redis.Redis:
    """A blocking client for REDIS_URL that follows failovers and slot moves (module doc).
    `options` are redis-py connection options (socket_timeout, ...)."""
    target = settings.redis_target
    if isinstance(target, DirectRedis):
        # A fixed address can change roles under it too (a virtual IP, a proxy).
        scheme = target.url.partition(":")[0]
        return redis.Redis.from_url(target.url, connection_class=_DIRECT[scheme], **options)
    if isinstance(target, SentinelRedis):
        return _sentinel_client(target, options)
    return _cluster_client(target, tag_slot(settings.redis_prefix), options)


class _DropOnTopologyError(AbstractConnection):
    """Turns a topology reply into a dropped connection and a ConnectionError. A mixin over
    the abstract connection: over Connection it would put TCP's connect before a unix
    socket's in _UnixConnection's MRO, and unix:// would reach localhost:6379 instead."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except _TOPOLOGY_EXCEPTIONS as exc:
            self.disconnect()  # type: ignore[no-untyped-call]
            reply = f"{getattr(exc, 'status_code', None) or type(exc).__name__} {exc}"
            where = self._host_error()  # type: ignore[no-untyped-call]
            raise NotPrimary(f"{where} is not the primary: {reply}") from exc


class _TCPConnection(_DropOnTopologyError, Connection):
    pass


class _UnixConnection(_DropOnTopologyError, UnixDomainSocketConnection):
    pass


class _SSLConnection(_DropOnTopologyError, SSLConnection):
    pass


_DIRECT: dict[str, type[Connection | UnixDomainSocketConnection]] = {
    "redis": _TCPConnection,
    "rediss": _SSLConnection,
    "unix": _UnixConnection,
}


class _SentinelConnection(_DropOnTopologyError, SentinelManagedConnection):
    pass


def _sentinel_client(target: SentinelRedis, options: dict[str, Any]) -> redis.Redis:
    sentinel_options: dict[str, Any] = {
        "socket_timeout": DISCOVERY_TIMEOUT_SECS,
        "socket_connect_timeout": DISCOVERY_TIMEOUT_SECS,
    }
    if target.sentinel_password is not None:
        sentinel_options["password"] = target.sentinel_password
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=sentinel_options
    )
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service,
        db=target.db,
        username=target.username,
        password=target.password,
        connection_class=_SentinelConnection,
        **options,
    )
    return client


class _ClusterLocator:
    """Finds the primary owning the deployment's slot, asking the seeds in turn."""

    def __init__(self, pool: ClusterConnectionPool, target: ClusterRedis, slot: int) -> None:
        self.pool = pool
        self.target = target
        self.slot = slot
        self.address: tuple[str, int] | None = None

    def owner(self) -> tuple[str, int]:
        errors = []
        for host, port in self.target.seeds:
            seed = redis.Redis(
                host,
                port,
                username=self.target.username,
                password=self.target.password,
                socket_timeout=DISCOVERY_TIMEOUT_SECS,
                socket_connect_timeout=DISCOVERY_TIMEOUT_SECS,
            )
            try:
                reply = seed.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
                address = slot_owner(reply, self.slot, host)
            except redis.RedisError as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            finally:
                seed.close()
            if address is None:
                errors.append(f"{host}:{port}: slot {self.slot} is not served")
                continue
            if address != self.address:
                # Connections to the former owner go when next idle, as Sentinel's pool does.
                self.address = address
                self.pool.disconnect(inuse_connections=False)
            return address
        raise RedisConnectionError(f"no cluster node serves slot {self.slot}: {errors}")


class _ClusterConnection(_DropOnTopologyError, Connection):
    def __init__(self, **kwargs: Any) -> None:
        self.locator: _ClusterLocator = kwargs.pop("locator")
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def connect(self) -> None:
        # As SentinelManagedConnection: each attempt asks where to connect first.
        self.retry.call_with_retry(self._connect_to_owner, self._failed)

    def _failed(self, error: Exception) -> None:
        self.disconnect(error)  # type: ignore[no-untyped-call]

    def _connect_to_owner(self) -> None:
        if self._sock:
            return
        self.host, self.port = self.locator.owner()
        self.connect_check_health(check_health=True, retry_socket_connect=False)


class ClusterConnectionPool(ConnectionPool):
    """A pool whose connections go to the primary of one slot, found on each connect
    (modelled on redis.sentinel.SentinelConnectionPool). A plain pool, not RedisCluster:
    rq needs MULTI/EXEC, which RedisCluster does not do; our keys share the one slot."""

    def __init__(self, target: ClusterRedis, slot: int, **kwargs: Any) -> None:
        kwargs["connection_class"] = _ClusterConnection
        super().__init__(**kwargs)
        self.locator = _ClusterLocator(self, target, slot)
        self.connection_kwargs["locator"] = self.locator
        self.connection_kwargs["username"] = target.username
        self.connection_kwargs["password"] = target.password


def _cluster_client(target: ClusterRedis, slot: int, options: dict[str, Any]) -> redis.Redis:
    return redis.Redis.from_pool(ClusterConnectionPool(target, slot, **options))

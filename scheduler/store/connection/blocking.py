"""Blocking Redis clients (redis-py) for the rq workers, the snapshot and the command line,
following the deployment's Redis where it goes (discovery.py): `sync_client`.

A fixed address (`redis://`, `rediss://`, `unix://`) connects there; a Sentinel service or a
cluster is located on each connect by discovery.locate, the same steps the API's connection
takes (mux.py), carried out here with redis-py. On both, a reply saying the node is not the
primary (TOPOLOGY_ERRORS) drops the connection and raises NotPrimary, a ConnectionError.

These classes extend redis-py's connections at points it does not document (read_response,
connect, on_connect_check_health): pyproject caps redis-py to the minor version they were
written against, and tests/store/test_redis_guard.py fails when one of them changes.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import AskError, ClusterDownError, ReadOnlyError, TryAgainError
from redis.retry import Retry

from scheduler.config import Settings
from scheduler.config.redis_url import ClusterRedis, DirectRedis, SentinelRedis
from scheduler.store.connection import discovery
from scheduler.store.connection.discovery import NotPrimary

# redis-py's classes of discovery.TOPOLOGY_ERRORS (LOADING is a ConnectionError there).
_TOPOLOGY_EXCEPTIONS = (AskError, ReadOnlyError, ClusterDownError, TryAgainError)


def sync_client(settings: Settings, **options: Any) -> redis.Redis:
    """A blocking client for REDIS_URL that follows failovers and slot moves (module doc).
    `options` are redis-py connection options (socket_timeout, ...)."""
    target = settings.redis_target
    if isinstance(target, DirectRedis):
        # A fixed address can change roles under it too (a virtual IP, a proxy).
        scheme = target.url.partition(":")[0]
        return redis.Redis.from_url(target.url, connection_class=_DIRECT[scheme], **options)
    return redis.Redis.from_pool(LocatedPool(target, settings.redis_prefix, **options))


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


def _ask(ask: discovery.Ask) -> Any:
    """One step of discovery.locate, on a short-lived connection."""
    node = redis.Redis(
        ask.host,
        ask.port,
        username=ask.username,
        password=ask.password,
        socket_timeout=discovery.DISCOVERY_TIMEOUT_SECS,
        socket_connect_timeout=discovery.DISCOVERY_TIMEOUT_SECS,
        # One try: a dead sentinel or seed costs DISCOVERY_TIMEOUT_SECS, then the next is
        # asked (redis-py's default retry made it ~3.6 s).
        retry=Retry(NoBackoff(), 0),
    )
    try:
        return node.execute_command(*ask.command)  # type: ignore[no-untyped-call]
    finally:
        node.close()


def locate(target: SentinelRedis | ClusterRedis, prefix: str) -> tuple[str, int]:
    """discovery.locate's steps carried out with blocking connections."""
    locating = discovery.Locating(target, prefix)
    while (ask := locating.ask) is not None:
        try:
            reply = _ask(ask)
        except discovery.ASK_ERRORS as exc:
            locating.fail(exc)
        else:
            locating.answer(reply)
    assert locating.address is not None
    return locating.address


class _Locator:
    """Where the pool's connections go now; connections to a former address go when next
    idle (as redis-py's Sentinel pool does)."""

    def __init__(self, pool: LocatedPool, target: SentinelRedis | ClusterRedis, prefix: str):
        self.pool = pool
        self.target = target
        self.prefix = prefix
        self.address: tuple[str, int] | None = None

    def owner(self) -> tuple[str, int]:
        address = locate(self.target, self.prefix)
        if address != self.address:
            self.address = address
            self.pool.disconnect(inuse_connections=False)
        return address


class _LocatedConnection(_DropOnTopologyError, Connection):
    """A connection that asks where to go on each connect (as redis-py's
    SentinelManagedConnection), and under Sentinel checks that the node is a primary."""

    def __init__(self, **kwargs: Any) -> None:
        self.locator: _Locator = kwargs.pop("locator")
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def connect(self) -> None:
        self.retry.call_with_retry(self._connect_to_owner, self._failed)

    def _failed(self, error: Exception) -> None:
        self.disconnect(error)  # type: ignore[no-untyped-call]

    def _connect_to_owner(self) -> None:
        if self._sock:
            return
        self.host, self.port = self.locator.owner()
        self.connect_check_health(check_health=True, retry_socket_connect=False)

    def on_connect_check_health(self, check_health: bool = True) -> None:
        super().on_connect_check_health(check_health=check_health)
        if discovery.checks_role(self.locator.target):
            self.send_command("ROLE")  # type: ignore[no-untyped-call]
            discovery.check_role(self.read_response(), self.host, self.port)


class LocatedPool(ConnectionPool):
    """A pool whose connections go to the primary a Sentinel service names, or to the one
    serving the deployment's cluster slot, found on each connect. A plain pool, not
    RedisCluster: rq needs MULTI/EXEC, which RedisCluster does not do; our keys share the
    one slot."""

    def __init__(self, target: SentinelRedis | ClusterRedis, prefix: str, **kwargs: Any) -> None:
        kwargs["connection_class"] = _LocatedConnection
        if isinstance(target, SentinelRedis):
            kwargs.setdefault("db", target.db)
        super().__init__(**kwargs)
        self.locator = _Locator(self, target, prefix)
        self.connection_kwargs["locator"] = self.locator
        self.connection_kwargs["username"] = target.username
        self.connection_kwargs["password"] = target.password

"""Where the Redis of REDIS_URL is right now.

REDIS_URL names one Redis (`redis://`, `rediss://`, `unix://`), the primary of a Sentinel
service (`redis+sentinel://`) or a Redis Cluster (`redis+cluster://`); config.parse_redis_url
reads it. Every key of a deployment carries the hash tag `{REDIS_PREFIX}`, so on a cluster
they all live in one slot and one connection to that slot's primary serves everything.

A connection resolves its address when it connects, never per command: Sentinel's current
primary (checked with ROLE), or the cluster node owning the tag's slot. A reply saying the
node is not (or no longer) the one to talk to (`TOPOLOGY_ERRORS`) drops the connection and
reaches the caller as a ConnectionError, the error a lost connection raises: the API turns it
into 503, the workers wait it out (workers.outage), and the next connect resolves afresh.

Sentinel is asked only for the primary's address (SENTINEL get-master-addr-by-name), and the
node itself then for its ROLE: a primary the sentinels still name while cut off from them, or
already demoted, is refused on connect or on its first write (READONLY). That ROLE needs an
ACL user allowed it (it is an @admin command) under Sentinel. redis-py's Sentinel client also
read the sentinels' down flags; the ROLE check covers what they catch but a primary cut off
with a sentinel that still names it, whose writes may be lost at the failover unless
REDIS_MIN_REPLICAS_ACKED has replicas hold them (docs/DEPLOYMENT.md, Redis with replicas).

The question is asked here once, as steps (`locate`): each step names a node and the command
to send it, and is given the reply, or the error, back. The API's asyncio connection (mux.py)
and the blocking clients (blocking.py) each only carry the steps out on their own sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from scheduler.config.redis_url import ClusterRedis, SentinelRedis
from scheduler.store.keys import Keys

# Replies from a node that is not the one to talk to now: a cluster slot moved or is being
# moved (MOVED, ASK), a primary demoted (READONLY), a cluster or replica without its primary
# (CLUSTERDOWN, MASTERDOWN, TRYAGAIN), a node still loading its data (LOADING). None of them
# ran the command.
TOPOLOGY_ERRORS = frozenset(
    ("MOVED", "ASK", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN")
)
# Sentinels and cluster seeds are asked with these bounds: a dead one must not hold up the
# question to the next.
DISCOVERY_TIMEOUT_SECS = 1.0


class NotPrimary(RedisConnectionError):
    """The node answered that it is not where this deployment's keys are written now."""


def is_topology_error(message: str) -> bool:
    return message.split(" ", 1)[0] in TOPOLOGY_ERRORS


def moved_to(message: str) -> tuple[str, int] | None:
    """Where a MOVED error (`MOVED <slot> <host>:<port>`) says the slot is served now; None
    for any other error, or an endpoint it does not name."""
    parts = message.split(" ")
    if len(parts) != 3 or parts[0] != "MOVED":
        return None
    host, _, port = parts[2].rpartition(":")
    if host in ("", "?") or not port.isdigit():
        return None
    return host, int(port)


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


class Ask(NamedTuple):
    """A step of `locate`: send `command` to the node at host:port (logged in as given)."""

    host: str
    port: int
    username: str | None
    password: str | None
    command: tuple[str, ...]


# What asking one node may end in; the next one is asked then.
ASK_ERRORS = (RedisError, OSError, TimeoutError)

Steps = Generator[Ask, Any, tuple[str, int]]


def locate(target: SentinelRedis | ClusterRedis, prefix: str) -> Steps:
    """Where the deployment's keys are written now: the primary Sentinel names, or the
    primary serving the tag's cluster slot. Asks each sentinel or seed in turn; raises
    RedisConnectionError when none answers."""
    if isinstance(target, SentinelRedis):
        return (yield from _sentinel_primary(target))
    return (yield from _slot_owner(target, tag_slot(prefix)))


class Locating:
    """`locate` being carried out: `ask` is the step to take next, None once `address` is
    known. A client sends each step's command and gives back the reply (`answer`) or the
    error (`fail`); the question itself is only asked here."""

    def __init__(self, target: SentinelRedis | ClusterRedis, prefix: str) -> None:
        self._steps = locate(target, prefix)
        self.address: tuple[str, int] | None = None
        self.ask: Ask | None = self._advance(lambda: next(self._steps))

    def answer(self, reply: Any) -> None:
        self.ask = self._advance(lambda: self._steps.send(reply))

    def fail(self, error: BaseException) -> None:
        self.ask = self._advance(lambda: self._steps.throw(error))

    def _advance(self, step: Callable[[], Ask]) -> Ask | None:
        if self.address is not None:
            raise RuntimeError("located already: no step is waiting for an answer")
        try:
            return step()
        except StopIteration as located:
            self.address = located.value
            return None


def _sentinel_primary(target: SentinelRedis) -> Steps:
    errors = []
    command = ("SENTINEL", "get-master-addr-by-name", target.service)
    for host, port in target.sentinels:
        try:
            reply = yield Ask(host, port, None, target.sentinel_password, command)
        except ASK_ERRORS as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        if reply:
            return _text(reply[0]), int(reply[1])
        errors.append(f"{host}:{port}: no primary named {target.service!r}")
    raise RedisConnectionError(f"no sentinel names a primary: {'; '.join(errors)}")


def _slot_owner(target: ClusterRedis, slot: int) -> Steps:
    errors = []
    for host, port in target.seeds:
        try:
            reply = yield Ask(host, port, target.username, target.password, ("CLUSTER", "SLOTS"))
        except ASK_ERRORS as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        owner = slot_owner(reply, slot, host)
        if owner is not None:
            return owner
        errors.append(f"{host}:{port}: slot {slot} is not served")
    raise RedisConnectionError(f"no cluster node serves slot {slot}: {'; '.join(errors)}")


def checks_role(target: object) -> bool:
    """Whether a connection asks its node's ROLE first: the sentinels may name a demoted
    primary for a moment."""
    return isinstance(target, SentinelRedis)


def check_role(reply: Any, host: str, port: int) -> None:
    """Raises NotPrimary unless a ROLE reply says the node is a primary."""
    role = _text(reply[0])
    if role != "master":
        raise NotPrimary(f"{host}:{port} is a {role}, not the primary")

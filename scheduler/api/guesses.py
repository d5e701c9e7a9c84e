"""Failed credentials, counted per client address: the login form's wrong keys and the
API's wrong bearer keys. Past AUTH_FAILURES_MAX in AUTH_FAILURES_WINDOW_SECS (a window
starting at the address's first failure) the address is answered 429 with Retry-After.

The count is in Redis (scripts/access.py), so every replica adds to and reads the same one.
A right key is never counted and costs no Redis call: a key route checks it first, and only
a wrong one goes to Redis. So that guessing stops too, a replica that has answered an
address 429 remembers it until the window ends and refuses it the right key as well (a
dict lookup); the login form asks Redis before comparing the key.

Why not the `limits` package: its Redis storage opens its own redis-py client from a URL,
outside the API's one multiplexed connection (store/connection/mux.py), with our Sentinel,
Cluster and TLS forms of REDIS_URL to map onto its own, and its keys outside the
deployment's hash tag; the count is two Redis commands in one script here.
"""

from __future__ import annotations

import logging
import math
import time
from ipaddress import ip_network

from redis.exceptions import RedisError
from starlette.types import Scope

from scheduler.api.client_address import Headers, client_address
from scheduler.api.stores import Store
from scheduler.config.networks import Networks
from scheduler.store.scripts import access

log = logging.getLogger("scheduler.api")

TOO_MANY = "too many failed attempts from this address: try again later"
# status, message, headers: a refusal as errors.Reply has it
Refusal = tuple[int, str, dict[str, str]]


def too_many(seconds: float) -> Refusal:
    return 429, TOO_MANY, {"Retry-After": str(max(1, math.ceil(seconds)))}


class Guesses:
    """The failed-credential counts of one API process's door (shared through Redis)."""

    def __init__(self, limit: int, window_secs: float, trusted: Networks = ()) -> None:
        self.limit = limit
        self.window_secs = window_secs
        self.trusted = trusted  # TRUSTED_PROXIES: whose X-Forwarded-For names the client
        # address -> time.monotonic() its window ends: the addresses this process has
        # answered 429 (bounded: one entry per address refused, dropped once stale).
        self.barred_until: dict[str, float] = {}

    def barred(self, address: str) -> float:
        """Seconds left of a 429 this process gave `address`, 0 without one (no Redis)."""
        until = self.barred_until.get(address)
        if until is None:
            return 0.0
        left = until - time.monotonic()
        if left <= 0:
            del self.barred_until[address]
            return 0.0
        return left

    def refusal_of(self, address: str, refusal: Refusal) -> Refusal:
        """`refusal` for a call without a credential (no guess, not counted), or 429 from an
        address this process has answered 429 (no Redis)."""
        left = self.barred(address)
        return too_many(left) if left else refusal

    async def failed(self, store: Store, address: str, refusal: Refusal) -> Refusal:
        """A wrong credential from `address`: counted; `refusal`, or 429 past the limit.
        When Redis cannot count it, the refusal stands (and the failure is logged)."""
        try:
            failures, left = await store.run(access.count_failure(address, self.window_secs))
        except RedisError as exc:  # ReplicasNotAcked too: the count may be on the primary
            log.warning("failed credential from %s not counted: %s", address, exc)
            return refusal
        if failures <= self.limit:
            return refusal
        self._bar(address, left)
        return too_many(left)

    async def wait_left(self, store: Store, address: str) -> float:
        """Seconds `address` must wait before trying a key again (0: it may now), as Redis
        counts its failures: the login form asks before comparing."""
        left = self.barred(address)
        if left:
            return left
        failures, left = await store.run(access.failures(address))
        if failures < self.limit:
            return 0.0
        self._bar(address, left)
        return left

    def _bar(self, address: str, left: float) -> None:
        now = time.monotonic()
        stale = [a for a, until in self.barred_until.items() if until <= now]
        for gone in stale:
            del self.barred_until[gone]
        self.barred_until[address] = now + left

    def address_of(self, peer: str | None, headers: Headers) -> str:
        """Whose failures a request's count: the client's address (client_address.py: the
        socket's peer, or behind a TRUSTED_PROXIES load balancer the address it forwarded);
        "" when it is not known (a Unix socket)."""
        found = client_address(peer, headers, self.trusted)
        if found is None:
            return ""
        if found.version == 6:
            # One host commonly holds a whole /64: counted per address, it would never be
            # limited.
            return str(ip_network((found, 64), strict=False))
        return str(found)

    def address_in(self, scope: Scope) -> str:
        """`address_of` an ASGI request."""
        client = scope.get("client")
        return self.address_of(client[0] if client else None, scope["headers"])

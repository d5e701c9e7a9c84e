"""The door's credentials, in one place (docs/SECURITY.md): whether a credential is right,
and what a wrong one gets. Every route that compares a credential asks here: the key rule
(http.BearerAuth and the hot lane), the agent routes (agents.AgentAuth: the key, the join
key, a node token's hash for the scripts to look up), the agents' networks, the login form.

A right credential is always served, whatever its address has got wrong: the key, a live
node token, the join key where it registers, a live UI session. Any metering of one
address's tests would meter the right key's holders behind it too (a NAT, an office, a load
balancer, an agent beside its operator); a key is kept from being guessed by its strength
instead (config/secrets.py: 128 bits, refused below at start).

Every wrong one is counted per client address, in Redis (scripts/access.py), so every replica
adds to the same count: a bound on the Redis work guessing costs, and a log line. Past
AUTH_FAILURES_MAX in AUTH_FAILURES_WINDOW_SECS (a window starting at the address's first
failure) the address's wrong credentials are answered 429 Retry-After from this process's
own bar until the window ends, with no Redis call; the first time, one WARNING names it. A
call with no Authorization header guesses nothing: it is refused, not counted (the original
Rust agent sends none).

A flood of addresses (an IPv6 guesser has 2**16 /64s in a /48) costs bounded memory and
work: the bar holds at most MAX_BARRED addresses, its ended ones dropped in the order they
end (a heap: no walk over the rest); past it an address's wrong credentials are answered
from its count in Redis, 429 all the same. The WARNINGs are at most one a second, the next
saying how many addresses were barred without a line of their own (a log flooded past
journald's rate limit would lose the lines that matter).

Why not the `limits` package: its Redis storage opens its own redis-py client from a URL,
outside the API's one multiplexed connection (store/connection/mux.py), with our Sentinel,
Cluster and TLS forms of REDIS_URL to map onto its own, and its keys outside the
deployment's hash tag; the count is two Redis commands in one script here.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import logging
import math
import time
from collections.abc import Callable, Iterable
from ipaddress import ip_network

from redis.exceptions import RedisError
from starlette.types import Scope

from scheduler.api.client_address import Headers, client_address
from scheduler.api.keyring import Keyring
from scheduler.api.routing import Access
from scheduler.api.stores import Store
from scheduler.config import Settings
from scheduler.config.networks import Networks
from scheduler.models.access_key import ADMIN, ANYONE, Principal, Role
from scheduler.store.scripts import access

log = logging.getLogger("scheduler.api")

# Said to a wrong credential only (a right one is served): waiting does not make it right.
TOO_MANY = "unauthorized: too many wrong credentials from this address (a right one is served)"
# Addresses one process bars at once (~200 bytes each): a few MB under a flood, and no
# deployment's own clients come near it.
MAX_BARRED = 10_000
SAY_EVERY_SECS = 1.0  # at most one WARNING of a bar this often
# status, message, headers: a refusal as errors.Reply has it
Refusal = tuple[int, str, dict[str, str]]
UNAUTHORIZED: Refusal = (401, "unauthorized", {})


def forbidden(caller: Principal, needed: Role) -> Refusal:
    """A right key whose role does not allow the call: 403, saying which role would."""
    return (
        403,
        f"forbidden: the key {caller.name!r} has the role {caller.role.value}; this call "
        f"needs {needed.value} or above",
        {},
    )


def _peer(scope: Scope) -> str | None:
    """An ASGI request's peer address: None on a Unix socket."""
    client = scope.get("client")
    return client[0] if client else None


def too_many(seconds: float) -> Refusal:
    """The lockout's 429, Retry-After the window's time left: what tells it from a quota's 429
    (api/errors.py OverQuota, none), and what the CLI says when to try again by."""
    return 429, TOO_MANY, {"Retry-After": str(max(1, math.ceil(seconds)))}


def token_hash(token: str) -> str:
    """What Redis keeps of a node token (and what the scripts are given): its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()


BEARER = b"Bearer "


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The token of the first Authorization header when it is `Bearer <token>`, else None."""
    for name, value in headers:
        if name == b"authorization":
            return value[len(BEARER) :] if value.startswith(BEARER) else None
    return None


def presents_credential(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the request sends an Authorization header: a wrong one is a guess, counted;
    none at all guesses nothing, and costs Redis nothing."""
    return any(name == b"authorization" for name, _ in headers)


class Credentials:
    """The API key, the agents' join key and the count of wrong credentials of one API
    process (the count shared through Redis)."""

    def __init__(
        self,
        api_key: str = "",
        join_key: str = "",
        limit: int = 10,
        window_secs: float = 300.0,
        trusted: Networks = (),
    ) -> None:
        self.has_key = bool(api_key)
        self.keyring = Keyring()  # the named keys, read from Redis (keyring.py)
        self.has_join_key = bool(join_key)
        self._key = api_key.encode()
        self._join_key = join_key.encode()
        self.limit = limit
        self.window_secs = window_secs
        self.trusted = trusted  # TRUSTED_PROXIES: whose X-Forwarded-For names the client
        self.clock: Callable[[], float] = time.monotonic
        # address -> clock() its window ends: the addresses whose wrong credentials this
        # process answers 429 (at most MAX_BARRED), and the same as a heap of (end, address)
        # to drop them as they end.
        self.barred_until: dict[str, float] = {}
        self._ends: list[tuple[float, str]] = []
        self._said_at = -math.inf  # clock() of the last WARNING of a bar
        self._unsaid = 0  # addresses barred since then without a line

    @classmethod
    def from_settings(cls, settings: Settings) -> Credentials:
        return cls(
            settings.api_key,
            settings.agent_join_key,
            settings.auth_failures_max,
            settings.auth_failures_window_secs,
            settings.trusted_proxy_list,
        )

    # Right: decided in this process, in constant time, with no Redis call.

    def door(self, access: Access, role: Role, headers: Headers) -> Principal | Refusal:
        """The key rule, for both fronts' doors (http.BearerAuth, lane.Lane.refused): a call
        the route table says is the key's (`access`, as RouteTable.access resolves it) is
        let in as its caller when one is set, if the caller's role allows `role`; refused
        UNAUTHORIZED without a key (counted by `refused`), or 403 with a key whose role is
        too low (not counted: the key is right). Any other access, and every call when no
        key is set, is let in here as ANYONE: the UI's cookie, AGENT_AUTH in the handler and
        AGENT_NETWORKS decide those elsewhere."""
        if access is not Access.KEY or not self.has_key:
            return ANYONE
        found = self.caller(headers)
        if found is None:
            return UNAUTHORIZED
        return found if found.allows(role) else forbidden(found, role)

    async def door_again(
        self, store: Store, peer: str | None, access: Access, role: Role, headers: Headers
    ) -> Principal | Refusal:
        """After `door`'s UNAUTHORIZED: when the bearer has a named key's form this process
        does not know, the keys are read again and the door asked once more, so one made
        through another replica a moment ago works at once rather than after
        KEYRING_REFRESH_SECS (its role's 403, if too low); else the refusal as `refused`
        answers it (counted, 429 past the limit), with no second read of the keys."""
        address = self.address_of(peer, headers)
        token = bearer_token(headers)
        if token is not None and await self._read_again_for(store, address, token):
            let_in = self.door(access, role, headers)
            if let_in is not UNAUTHORIZED:
                return let_in
        if not presents_credential(headers):
            return UNAUTHORIZED
        return await self._counted(store, address, UNAUTHORIZED)

    def caller(self, headers: Headers) -> Principal | None:
        """Whose key the first Authorization header's bearer is: ADMIN for TINYAWS_API_KEY, a
        named key's principal (the keyring's), or None (no key set, none sent, a wrong one)."""
        token = bearer_token(headers)
        return None if token is None else self._whose(token)

    def key_of(self, secret: str) -> Principal | None:
        """Whose key `secret` is (the login form's; never one, with no key set)."""
        return self._whose(secret.encode())

    async def key_of_again(self, scope: Scope, secret: str) -> Principal | None:
        """`key_of` for the login form, with the keys read again first when `secret` has a
        named key's form this process does not know (made a moment ago through another
        replica), as `door_again` does for a bearer."""
        found = self.key_of(secret)
        if found is not None:
            return found
        store: Store = scope["app"].state.store
        if not await self._read_again_for(store, self._address_in(scope), secret.encode()):
            return None
        return self.key_of(secret)

    def _whose(self, secret: bytes) -> Principal | None:
        """The one place a secret is told a key: ADMIN for TINYAWS_API_KEY, a named key's
        principal (the keyring's), or None (no key set, a wrong one)."""
        if not self.has_key:
            return None
        return ADMIN if self._is_key(secret) else self.keyring.find(secret)

    async def _read_again_for(self, store: Store, address: str, secret: bytes) -> bool:
        """Whether the keys were read again for `secret`: one of a named key's form, from an
        address this process does not bar (a guesser past the limit costs no Redis work);
        False when Redis fails."""
        if not self.has_key or not self.keyring.looks_named(secret) or self.barred(address):
            return False
        try:
            await self.keyring.refresh(store)
        except RedisError:
            return False
        return True

    def _is_key(self, secret: bytes) -> bool:
        """The one comparison with TINYAWS_API_KEY, in constant time (never, with no key set):
        the header's, the login form's and an agent call's bearer (caller_of) alike."""
        return self.has_key and hmac.compare_digest(secret, self._key)

    def caller_of(self, token: str) -> str:
        """A bearer token as the scripts take it (store/scripts/library.py, node_access):
        "" for none, "key", "join" (AGENT_JOIN_KEY, which they accept only to register a new
        node), else its hash, which they look up among the live node tokens."""
        if not token:
            return ""
        if self._is_key(token.encode()):
            return "key"
        if self.has_join_key and hmac.compare_digest(token.encode(), self._join_key):
            return "join"
        return token_hash(token)

    # Wrong: counted.

    async def refused(
        self,
        store: Store,
        peer: str | None,
        headers: Headers,
        refusal: Refusal = UNAUTHORIZED,
        guessed: bool | None = None,
    ) -> Refusal:
        """The answer to a wrong credential (or none) from the client of (`peer`, `headers`):
        `refusal`, or 429 past the limit. `guessed`: whether the call presented one (default:
        an Authorization header that is no right key: a named key refused where named keys
        make no call, outside AGENT_NETWORKS or registering a node, guessed nothing); without
        one nothing is counted and `refusal` stands. A wrong one is counted in Redis, unless
        this process bars the address already; when Redis cannot count it, the refusal stands
        (and the failure is logged). A bearer of a named key's form this process does not
        know has the keys read again first: one made a moment ago through another replica
        is right, refused where a handler looked it up before, but not counted."""
        if guessed is None:
            guessed = presents_credential(headers) and self.caller(headers) is None
        if not guessed:
            return refusal
        address = self.address_of(peer, headers)
        token = bearer_token(headers)
        read_again = token is not None and await self._read_again_for(store, address, token)
        if read_again and self.caller(headers) is not None:
            return refusal  # right after all: not counted
        return await self._counted(store, address, refusal)

    async def _counted(self, store: Store, address: str, refusal: Refusal) -> Refusal:
        """A wrong credential from `address` counted in Redis: `refusal`, or 429 past the
        limit (this process's bar answers without Redis)."""
        left = self.barred(address)
        if left:
            return too_many(left)
        try:
            failures, left = await store.run(access.count_failure(address, self.window_secs))
        except RedisError as exc:  # ReplicasNotAcked too: the count may be on the primary
            log.warning("failed credential from %s not counted: %s", address, exc)
            return refusal
        if failures <= self.limit:
            return refusal
        self._bar(address, left, failures)
        return too_many(left)

    async def refused_asgi(
        self, scope: Scope, refusal: Refusal = UNAUTHORIZED, guessed: bool | None = None
    ) -> Refusal:
        """`refused` for an ASGI request, counted in its app's store."""
        store: Store = scope["app"].state.store
        return await self.refused(store, _peer(scope), scope["headers"], refusal, guessed)

    def _address_in(self, scope: Scope) -> str:
        """`address_of` an ASGI request."""
        return self.address_of(_peer(scope), scope["headers"])

    def barred(self, address: str) -> float:
        """Seconds left of this process's bar on `address`, 0 without one (no Redis)."""
        until = self.barred_until.get(address)
        if until is None:
            return 0.0
        left = until - self.clock()
        if left <= 0:
            del self.barred_until[address]
            return 0.0
        return left

    def _bar(self, address: str, left: float, failures: int) -> None:
        """Bars `address` until its window ends, saying so: this process counts none of its
        wrong credentials again until then. With MAX_BARRED barred already, not: Redis
        counts them on, and answers 429 all the same."""
        now = self.clock()
        ends = self._ends
        while ends and ends[0][0] <= now:
            until, ended = heapq.heappop(ends)
            if self.barred_until.get(ended) == until:
                del self.barred_until[ended]
        if len(self.barred_until) >= MAX_BARRED:
            return
        self.barred_until[address] = now + left
        heapq.heappush(ends, (now + left, address))
        self._say(address, left, failures, now)

    def _say(self, address: str, left: float, failures: int, now: float) -> None:
        """One WARNING naming a barred address, at most one every SAY_EVERY_SECS."""
        if now - self._said_at < SAY_EVERY_SECS:
            self._unsaid += 1
            return
        unsaid, self._unsaid, self._said_at = self._unsaid, 0, now
        log.warning(
            "%s: %d wrong credentials (key, node token, join key or login) within "
            "AUTH_FAILURES_WINDOW_SECS=%g, past AUTH_FAILURES_MAX=%d: its wrong ones get "
            "429 for the %.0f s left of the window; right ones are still served%s",
            address or "unknown address",
            failures,
            self.window_secs,
            self.limit,
            left,
            f" ({unsaid} other addresses barred since the last line)" if unsaid else "",
        )

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

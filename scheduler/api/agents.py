"""What stands between a stranger and the agent routes (poll, report, register, heartbeat):
who the caller is under AGENT_AUTH, and how many report bytes a process reads at once.

Node tokens are random, handed out once by POST /nodes/register; Redis holds only their
SHA-256, and the scripts decide (store/scripts/library.py, node_access), so a token works on
every replica and stops working everywhere the moment its node is deleted.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from starlette.requests import Request

from scheduler.api.guesses import Credentials, forbidden
from scheduler.api.guesses import token_hash as token_hash
from scheduler.api.http import HTTPError
from scheduler.api.params import PARAMS, Query
from scheduler.api.routing import RouteTable
from scheduler.config import Settings
from scheduler.models.access_key import Principal, Role
from scheduler.store.errors import Forbidden, Unauthorized

# Report bodies up to this size are read before the script checks the caller and the job
# (one round trip); larger or unsized ones are checked first (CHECK_REPORT), so a stranger's
# or an unknown job's 64 MiB body is never read.
PRECHECK_OVER_BYTES = 64 * 1024


def new_token() -> str:
    return secrets.token_urlsafe(32)


def bearer(request: Request) -> str:
    """The bearer token of the first Authorization header, or ""."""
    return bearer_of(request.headers.get("authorization", ""))


def bearer_of(authorization: str) -> str:
    return authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else ""


@dataclass(frozen=True, slots=True)
class AgentAuth:
    """Who makes an agent call under AGENT_AUTH; the key and the join key are compared by
    the door's Credentials (guesses.py), and a refusal raised here or by a script
    (Unauthorized) is answered there too: counted when the call presented a credential."""

    mode: str
    credentials: Credentials
    # The route table, for the least role a named key needs on the operator's agent routes
    # (`operator_or_node`): their Method.role, declared there once.
    routes: RouteTable

    @classmethod
    def from_settings(
        cls, settings: Settings, credentials: Credentials, routes: RouteTable
    ) -> AgentAuth:
        return cls(settings.agent_auth, credentials, routes)

    @property
    def key_required(self) -> bool:
        """Token mode with a key (or a join key): only those add nodes."""
        found = self.credentials
        return self.mode == "token" and (found.has_key or found.has_join_key)

    def identify(self, request: Request) -> str:
        """The caller as the scripts take it (library.py, node_access), whatever the mode;
        "join" for the join key, which the scripts accept only to register a node. With
        AGENT_AUTH=token a named key is refused (`refuse_named`)."""
        token = bearer(request)
        caller = self.credentials.caller_of(token)
        if self.mode == "token":
            self.refuse_named(token, caller)
        return caller

    def operator_or_node(self, request: Request) -> str:
        """The caller of DELETE /nodes/{id} and the drains: the operator (anyone, when no key
        is set; the admin key; a named key whose role allows the route's Method.role, else
        403, not counted: the key is right), or a node token, which the scripts let act on
        its own node only. A node's token is taken in open mode too: the reference agent
        holds one there as well, and stops cleanly with it (drain, deregister); anything
        else is a wrong credential."""
        token = bearer(request)
        caller = self.credentials.caller_of(token)
        if not self.credentials.has_key or caller == "key":
            return "key"
        named = self.named(token, caller)
        if named is not None:
            needed = self.role_needed(request)
            if not named.allows(needed):
                raise Forbidden(forbidden(named, needed)[1])
            return "key"
        if caller not in ("", "join"):
            return caller
        raise Unauthorized()

    def role_needed(self, request: Request) -> Role:
        """The least role the request's route needs, as the table declares it (the door's
        RouteTable.door, with the parameters http.ParamsDoor parsed)."""
        query: Query = request.scope[PARAMS]
        return self.routes.door(request.method, query.path, query.values)[1]

    def named(self, token: str, caller: str) -> Principal | None:
        """The named key `token` is (`caller`: credentials.caller_of's answer for it), or
        None: a node token, the admin key, the join key, none."""
        if caller in ("", "key", "join") or not self.credentials.has_key:
            return None
        return self.credentials.keyring.find(token.encode())

    def refuse_named(self, token: str, caller: str) -> None:
        """Forbidden for a named key: a right key (so 403, not counted as a guess), but named
        keys are people's and programs' keys, which make no agent calls: a node's token (or
        the admin key, or the join key where it registers) does."""
        named = self.named(token, caller)
        if named is not None:
            raise Forbidden(
                f"forbidden: the key {named.name!r} is a named key; named keys make no agent "
                "calls: a node's token does"
            )

    def caller(self, request: Request) -> str:
        """The caller of a poll, heartbeat or report: anyone at all with AGENT_AUTH=open. With
        AGENT_AUTH=token a call without a bearer is refused here, before Redis or its body."""
        return self.caller_of(request.headers.get("authorization", ""))

    def caller_of(self, authorization: str) -> str:
        """`caller` from the first Authorization header's value ("" without one)."""
        if self.mode == "open":
            return "open"
        token = bearer_of(authorization)
        caller = self.credentials.caller_of(token)
        if not caller:
            raise Unauthorized()
        self.refuse_named(token, caller)
        return caller


class ReportBudget:
    """Bytes of report bodies held at once in this process (REPORT_BYTES_IN_FLIGHT), counted
    as they arrive, not as declared: a client trickling a body, or one sending no length,
    holds only what it has sent. One event loop, so no lock: nothing awaits between a check
    and its count."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[Callable[[int], None]]:
        """A `charge(size)` for read_body; what it took is given back when the block ends
        (the report is decoded and stored by then)."""
        taken = 0

        def charge(size: int) -> None:
            nonlocal taken
            if self.used + size > self.limit:
                raise HTTPError(503, "too many reports being read: retry", {"Retry-After": "1"})
            self.used += size
            taken += size

        try:
            yield charge
        finally:
            self.used -= taken

"""What stands between a stranger and the agent routes (poll, report, register, heartbeat):
who the caller is under AGENT_AUTH, and how many report bytes a process reads at once.

Node tokens are random, handed out once by POST /nodes/register; Redis holds only their
SHA-256, and the scripts decide (store/scripts/library.py, node_access), so a token works on
every replica and stops working everywhere the moment its node is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from starlette.requests import Request

from scheduler.api.http import HTTPError
from scheduler.config import Settings
from scheduler.store.errors import Unauthorized

# Report bodies up to this size are read before the script checks the caller and the job
# (one round trip); larger or unsized ones are checked first (CHECK_REPORT), so a stranger's
# or an unknown job's 64 MiB body is never read.
PRECHECK_OVER_BYTES = 64 * 1024


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(request: Request) -> str:
    """The bearer token of the first Authorization header, or ""."""
    return bearer_of(request.headers.get("authorization", ""))


def bearer_of(authorization: str) -> str:
    return authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else ""


@dataclass(frozen=True, slots=True)
class AgentAuth:
    mode: str
    api_key: str
    join_key: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentAuth:
        return cls(settings.agent_auth, settings.api_key, settings.agent_join_key)

    @property
    def key_required(self) -> bool:
        """Token mode with a key (or a join key): only those add nodes."""
        return self.mode == "token" and bool(self.api_key or self.join_key)

    def identify(self, request: Request) -> str:
        """The caller as the scripts take it (library.py, node_access), whatever the mode;
        "join" for the join key, which the scripts accept only to register a node."""
        return self.identify_token(bearer(request))

    def identify_token(self, token: str) -> str:
        if not token:
            return ""
        if self.api_key and hmac.compare_digest(token.encode(), self.api_key.encode()):
            return "key"
        if self.join_key and hmac.compare_digest(token.encode(), self.join_key.encode()):
            return "join"
        return token_hash(token)

    def operator_or_node(self, request: Request) -> str:
        """The caller of DELETE /nodes/{id}: the operator (anyone, when no key is set), or in
        token mode a node token, which the script lets remove only its own node."""
        caller = self.identify(request)
        if not self.api_key or caller == "key":
            return "key"
        if self.mode == "token" and caller not in ("", "join"):
            return caller
        raise Unauthorized()

    def caller(self, request: Request) -> str:
        """The caller of a poll, heartbeat or report: anyone at all with AGENT_AUTH=open. With
        AGENT_AUTH=token a call without a bearer is refused here, before Redis or its body."""
        return self.caller_of(request.headers.get("authorization", ""))

    def caller_of(self, authorization: str) -> str:
        """`caller` from the first Authorization header's value ("" without one)."""
        if self.mode == "open":
            return "open"
        caller = self.identify_token(bearer_of(authorization))
        if not caller:
            raise Unauthorized()
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

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

from scheduler.api.guesses import Credentials
from scheduler.api.guesses import token_hash as token_hash
from scheduler.api.http import HTTPError
from scheduler.config import Settings
from scheduler.store.errors import Unauthorized

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

    @classmethod
    def from_settings(cls, settings: Settings, credentials: Credentials) -> AgentAuth:
        return cls(settings.agent_auth, credentials)

    @property
    def key_required(self) -> bool:
        """Token mode with a key (or a join key): only those add nodes."""
        found = self.credentials
        return self.mode == "token" and (found.has_key or found.has_join_key)

    def identify(self, request: Request) -> str:
        """The caller as the scripts take it (library.py, node_access), whatever the mode;
        "join" for the join key, which the scripts accept only to register a node."""
        return self.credentials.caller_of(bearer(request))

    def operator_or_node(self, request: Request) -> str:
        """The caller of DELETE /nodes/{id} and the drains: the operator (anyone, when no key
        is set), or a node token, which the scripts let act on its own node only. A node's
        token is taken in open mode too: the reference agent holds one there as well, and
        stops cleanly with it (drain, deregister); anything else is a wrong credential."""
        caller = self.identify(request)
        if not self.credentials.has_key or caller == "key":
            return "key"
        if caller not in ("", "join"):
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
        caller = self.credentials.caller_of(bearer_of(authorization))
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

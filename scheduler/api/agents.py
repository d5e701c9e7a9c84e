"""What stands between a stranger and the agent routes (poll, report, register, heartbeat):
who the caller is under AGENT_AUTH, and how many report bytes a process reads at once.

Node tokens are random, handed out once by POST /nodes/register; Redis holds only their
SHA-256, and the scripts decide (lua.CALLER), so a token works on every replica and stops
working everywhere the moment its node is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

from starlette.requests import Request

from scheduler.api.http import HTTPError
from scheduler.config import Settings

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
    value = request.headers.get("authorization", "")
    return value[len("Bearer ") :] if value.startswith("Bearer ") else ""


@dataclass(frozen=True, slots=True)
class AgentAuth:
    mode: str
    api_key: str

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentAuth:
        return cls(settings.agent_auth, settings.api_key)

    @property
    def key_required(self) -> bool:
        """Token mode with a key: only the operator's key adds nodes."""
        return self.mode == "token" and bool(self.api_key)

    def identify(self, request: Request) -> str:
        """The caller as the scripts take it (lua.CALLER), whatever the mode."""
        token = bearer(request)
        if not token:
            return ""
        if self.api_key and hmac.compare_digest(token.encode(), self.api_key.encode()):
            return "key"
        return token_hash(token)

    def caller(self, request: Request) -> str:
        """The caller of a poll, heartbeat or report: anyone at all with AGENT_AUTH=open."""
        return "open" if self.mode == "open" else self.identify(request)


class ReportBudget:
    """Bytes of report bodies being read at once in this process (REPORT_BYTES_IN_FLIGHT).
    One event loop, so no lock: nothing awaits between the check and the count."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @contextlib.contextmanager
    def reserve(self, size: int) -> Iterator[None]:
        if self.used + size > self.limit:
            raise HTTPError(503, "too many reports being read: retry", {"Retry-After": "1"})
        self.used += size
        try:
            yield
        finally:
            self.used -= size

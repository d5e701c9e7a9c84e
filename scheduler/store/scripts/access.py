"""The door's scripts, each with its call: the web UI's sessions (a login's random id, kept
by its SHA-256 with a TTL), the no-key UI's CSRF secret (one per deployment, shared by
every replica), and the failed credentials counted per client address (a fixed window)."""

from __future__ import annotations

import math
from typing import Any

from scheduler.store.scripts.script import Call, Script

START_SESSION = Script(
    "START_SESSION",
    "session ttl_ms",
    lambda reply: None,
)

SESSION_ALIVE = Script(
    "SESSION_ALIVE",
    "session",
    lambda reply: bool(reply),
    read_only=True,
)

END_SESSION = Script(
    "END_SESSION",
    "session",
    lambda reply: None,
)

UI_SECRET = Script(
    "UI_SECRET",
    "fresh",
    lambda reply: bytes(reply).decode(),
)

COUNT_FAILURE = Script(
    "COUNT_FAILURE",
    "address window_ms",
    lambda reply: _failures(reply),
)


def _failures(reply: Any) -> tuple[int, float]:
    """(failures, seconds the window has left)."""
    return int(reply[0]), int(reply[1]) / 1000


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def start_session(session_hash: str, ttl_secs: float) -> Call[None]:
    return START_SESSION.call(session=session_hash, ttl_ms=_ms(ttl_secs))


def session_alive(session_hash: str) -> Call[bool]:
    return SESSION_ALIVE.call(session=session_hash)


def end_session(session_hash: str) -> Call[None]:
    return END_SESSION.call(session=session_hash)


def ui_secret(fresh: str) -> Call[str]:
    return UI_SECRET.call(fresh=fresh)


def count_failure(address: str, window_secs: float) -> Call[tuple[int, float]]:
    return COUNT_FAILURE.call(address=address, window_ms=_ms(window_secs))

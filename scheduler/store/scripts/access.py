"""The door's scripts, each with its call: the web UI's sessions (a login's random id, kept
by its SHA-256 with a TTL, holding who logged in), the no-key UI's CSRF secret (one per
deployment, shared by every replica), the failed credentials counted per client address (a
fixed window), and the named keys (models/access_key.py: made, revoked, read again by each
API when they change)."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from scheduler.models.access_key import ADMIN, MAX_KEYS, AuditEntry, KeyRecord, Principal
from scheduler.store.errors import Conflict, KeyNotFound, StoreNotReady
from scheduler.store.scripts import codes
from scheduler.store.scripts.script import Call, Script

# The audit stream's length, about (XADD MAXLEN ~): the newest admin calls.
AUDIT_MAX = 10_000

START_SESSION = Script(
    "START_SESSION",
    "session ttl_ms who",
    lambda reply: None,
)

SESSION_ALIVE = Script(
    "SESSION_ALIVE",
    "session",
    lambda reply: _who(reply),
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


_principal = msgspec.json.Decoder(Principal)
# What a session started before named keys holds: only TINYAWS_API_KEY logged in then.
_ADMIN_SESSION = b"1"


def _who(reply: Any) -> Principal | None:
    """Who a live session logged in as (START_SESSION's `who`), None when it is gone."""
    if reply is None:
        return None
    if bytes(reply) == _ADMIN_SESSION:
        return ADMIN
    return _principal.decode(reply)


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def start_session(session_hash: str, ttl_secs: float, who: Principal) -> Call[None]:
    """A session for `who`, kept as its name, role and key_id in JSON (ADMIN: TINYAWS_API_KEY)."""
    who_json = msgspec.json.encode(who)
    return START_SESSION.call(session=session_hash, ttl_ms=_ms(ttl_secs), who=who_json)


def session_alive(session_hash: str) -> Call[Principal | None]:
    return SESSION_ALIVE.call(session=session_hash)


def end_session(session_hash: str) -> Call[None]:
    return END_SESSION.call(session=session_hash)


def ui_secret(fresh: str) -> Call[str]:
    return UI_SECRET.call(fresh=fresh)


def count_failure(address: str, window_secs: float) -> Call[tuple[int, float]]:
    return COUNT_FAILURE.call(address=address, window_ms=_ms(window_secs))


ADD_KEY = Script(
    "ADD_KEY",
    "name record role at by max_keys audit_max",
    lambda reply: _added(reply),
)

REVOKE_KEY = Script(
    "REVOKE_KEY",
    "name at by audit_max",
    lambda reply: _revoked(reply),
)

KEYRING = Script(
    "KEYRING",
    "known",
    lambda reply: _keyring(reply),
    read_only=True,
)

READ_AUDIT = Script(
    "READ_AUDIT",
    "count",
    lambda reply: [_audit_entry(entry_id, fields) for entry_id, fields in reply],
    read_only=True,
)

_key_record = msgspec.json.Decoder(KeyRecord)


def _audit_entry(entry_id: bytes, fields: list[bytes]) -> AuditEntry:
    said = {fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields), 2)}
    return AuditEntry(
        id=entry_id.decode(),
        at=float(said.get("at", 0)),
        by=said.get("by", ""),
        action=said.get("action", ""),
        name=said.get("name", ""),
        role=said.get("role", ""),
        detail=said.get("detail", ""),
    )


def _added(reply: Any) -> int:
    if int(reply[0]) == codes.NOT_READY:
        raise StoreNotReady()
    if int(reply[0]) == 1:
        raise Conflict("a key with that name exists: revoke it first, or choose another name")
    if int(reply[0]) == 2:
        raise Conflict(f"too many keys (at most {MAX_KEYS}): revoke some first")
    return int(reply[1])


def _revoked(reply: Any) -> int:
    if int(reply) == -codes.NOT_READY:
        raise StoreNotReady()
    if not int(reply):
        raise KeyNotFound()
    return int(reply)


def _keyring(reply: Any) -> tuple[int, list[KeyRecord] | None]:
    """(the version, the records when they changed since the one known, else None)."""
    version, changed, flat = int(reply[0]), int(reply[1]), reply[2:]
    if not changed:
        return version, None
    return version, [_key_record.decode(flat[i + 1]) for i in range(0, len(flat), 2)]


def add_key(record: KeyRecord, at: float, by: Principal) -> Call[int]:
    """The version of the keys once `record` is added (Conflict: its name is taken, or
    MAX_KEYS are held; StoreNotReady: Redis lost its data, the snapshot not back yet)."""
    return ADD_KEY.call(
        name=record.name,
        record=msgspec.json.encode(record),
        role=record.role.value,
        at=at,
        by=by.name,
        max_keys=MAX_KEYS,
        audit_max=AUDIT_MAX,
    )


def revoke_key(name: str, at: float, by: Principal) -> Call[int]:
    """The version of the keys once the key `name` is gone (KeyNotFound: none has it;
    StoreNotReady: Redis lost its data, the snapshot not back yet)."""
    return REVOKE_KEY.call(name=name, at=at, by=by.name, audit_max=AUDIT_MAX)


def read_audit(count: int) -> Call[list[AuditEntry]]:
    """The newest `count` admin calls, newest first."""
    return READ_AUDIT.call(count=count)


def keyring(known: int) -> Call[tuple[int, list[KeyRecord] | None]]:
    return KEYRING.call(known=known)

"""Named API keys and their roles (docs/SECURITY.md, Named keys): who may do what.

A deployment's TINYAWS_API_KEY is its admin key, as it always was. An admin makes more keys,
each with a name and a role, and revokes them by name. A role is a rung: each allows what the
one below it does and more.

- reader: reads jobs, their output and events, schedules, nodes and metrics; a job's
  env_vars show by name only (their values are often secrets);
- submitter: also submits, cancels and retries jobs;
- operator: also drains and removes nodes and manages schedules;
- admin: also manages keys.

Redis keeps a key's SHA-256, never the key; the key is shown once, when it is made. A named
key starts with `tka_`, so a secret scanner can find one that leaked. Pure: no I/O here.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from enum import Enum
from typing import Annotated

import msgspec

from scheduler.models.namespace import (
    MAX_PER_KEY,
    Namespace,
    OutsideNamespace,
    script_scope,
    shown,
    stored,
)
from scheduler.models.rules import in_words

KEY_PREFIX = "tka_"
# A key's name: how it is shown in listings and in who did what.
NAME_RULE = in_words(
    r"^[a-z0-9][a-z0-9._-]{0,63}$",
    "1 to 64 characters of a-z 0-9 . _ -, the first a letter or digit",
)
NAME_RE = re.compile(NAME_RULE)
# How many named keys a deployment holds at most: every API process keeps them all in
# memory (about 200 bytes each) and reads them again whenever one changes.
MAX_KEYS = 1000
AUDIT_PAGE = 100  # GET /audit's entries when no limit is asked


class Role(Enum):
    """The rungs, lowest first: each allows what the ones before it do."""

    READER = "reader"
    SUBMITTER = "submitter"
    OPERATOR = "operator"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what `needed` may."""
        return _RUNGS[self] >= _RUNGS[needed]


ROLES = tuple(role.value for role in Role)  # their names, lowest first
# Each role's rung, looked up once per call at the door (ROLES.index was most of its cost).
_RUNGS = {role: rung for rung, role in enumerate(Role)}


KeyName = Annotated[str, msgspec.Meta(pattern=NAME_RULE)]


# The namespaces a key is limited to (models/namespace.py): none, every namespace.
KeyNamespaces = Annotated[list[Namespace], msgspec.Meta(max_length=MAX_PER_KEY)]


class KeyRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The POST /keys body."""

    name: KeyName
    role: Role
    namespaces: KeyNamespaces = []


class KeyView(msgspec.Struct, kw_only=True):
    """A named key as listed: never the key itself. `created_by` is the name of the key that
    made it (`admin` for TINYAWS_API_KEY)."""

    name: str
    role: Role
    created_at: float
    created_by: str
    namespaces: list[str] = []  # none: every namespace


class KeyMade(KeyView, kw_only=True):
    """The answer to POST /keys: the key, shown this once."""

    key: str


class KeyRecord(KeyView, kw_only=True):
    """A named key as Redis keeps it: its view and the SHA-256 of the key (hex)."""

    hash: str

    def view(self) -> KeyView:
        return KeyView(
            name=self.name,
            role=self.role,
            created_at=self.created_at,
            created_by=self.created_by,
            namespaces=self.namespaces,
        )


class AuditEntry(msgspec.Struct, kw_only=True):
    """An admin call, as GET /audit lists it: when (epoch s), by which key, what it did
    (`key add`, `key revoke`, `quota set`), on which key name and role (a quota: namespace)."""

    id: str  # its place in the stream (GET /audit reads the newest; it takes no `before`)
    at: float
    by: str
    action: str
    name: str
    role: str
    detail: str = ""  # what else it set: a quota's limits (`quota set`)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who makes a call: a named key, or the admin key (`ADMIN`); `ANYONE` when no key is set
    (every call is let in, as the original's)."""

    name: str
    role: Role
    # Which key of that name and role (`key_id`): a key revoked and made again under the same
    # name and role (a leaked key rotated) is another key, so a UI session or a stream the
    # old one opened is not the new one's (keyring.holds). "" for ADMIN and ANYONE.
    key_id: str = ""
    # The namespaces its calls may touch (models/namespace.py), in the order the key was made
    # with; none: every namespace (the admin key, and a named key made without any).
    namespaces: tuple[str, ...] = ()

    def allows(self, needed: Role) -> bool:
        return self.role.allows(needed)

    def sees(self, namespace: str) -> bool:
        """Whether a job of `namespace` (as stored: "" for default) is this key's to see."""
        return not self.namespaces or shown(namespace) in self.namespaces

    @property
    def scope(self) -> str:
        """Its namespaces as the scripts take them (models/namespace.py `script_scope`): "" for
        every namespace."""
        return script_scope(self.namespaces)

    @property
    def home(self) -> str:
        """The namespace a job it submits naming none goes to (as stored)."""
        return stored(self.namespaces[0]) if self.namespaces else ""

    def place(self, namespace: str) -> str:
        """The namespace (as stored) a job or schedule this key makes belongs to: the one it
        names (`namespace`, "" for none), else the key's home. OutsideNamespace for one the
        key is not limited to."""
        where = stored(namespace) if namespace else self.home
        if not self.sees(where):
            raise OutsideNamespace(self.name, where, self.namespaces)
        return where

    @property
    def who(self) -> str:
        """The name who-did-what records: "" for ANYONE (no key set: nobody is known)."""
        return "" if self is ANYONE else self.name

    @property
    def sees_secrets(self) -> bool:
        """Whether a job's env_vars show with their values (a reader sees their names)."""
        return self.role.allows(Role.SUBMITTER)


ADMIN = Principal("admin", Role.ADMIN)  # TINYAWS_API_KEY
ANYONE = Principal("anyone", Role.ADMIN)  # no key set: the API asks none


def key_id(record_hash: str) -> str:
    """A named key's Principal.key_id: enough of its hash to tell two keys apart (the
    session's value in Redis holds it; not the whole hash, which is the lookup's)."""
    return record_hash[:16]


def new_key() -> str:
    """A named key: its prefix and 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str | bytes) -> str:
    """What Redis keeps of a named key (and what the keyring looks up): its SHA-256, hex. A
    key is 256 random bits, so a plain hash is as hard to reverse as the key is to guess."""
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).hexdigest()


def new_record(request: KeyRequest, key: str, now: float, by: Principal) -> KeyRecord:
    return KeyRecord(
        name=request.name,
        role=request.role,
        created_at=now,
        created_by=by.name,
        hash=key_hash(key),
        namespaces=list(dict.fromkeys(request.namespaces)),
    )

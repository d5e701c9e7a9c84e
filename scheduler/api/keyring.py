"""This API process's copy of the named keys (models/access_key.py), by their SHA-256: the
door looks a bearer up here, in memory, with no Redis call (one dict lookup on the hot lane).

Every change of the keys (made, revoked: api/keys.py) moves a version in Redis; each process
asks for the keys every KEYRING_REFRESH_SECS with the version it holds, which costs one GET's
worth of Redis work when nothing changed (scripts/access.py KEYRING). So a key made or
revoked through one replica works, or stops working, on every replica within that time; on
the replica that made the change, at once (it reads them again before answering).

A Redis that lost its data holds no version and no keys until the snapshot's are put back
(snapshot/access_keys.py): every process drops its copy at its next look, and reads the
restored keys at the one after. A version is never below the time in ms it was set at
(access.lua next_keys_version), so none after a loss equals one a process held before.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from scheduler.api.stores import Store
from scheduler.models.access_key import KEY_PREFIX, KeyRecord, Principal, key_hash, key_id
from scheduler.store.scripts import access

log = logging.getLogger("scheduler.api")

_PREFIX = KEY_PREFIX.encode()


class Keyring:
    def __init__(self) -> None:
        self.version = -1  # none read yet: the first look reads them all
        self.by_hash: dict[str, Principal] = {}
        self.by_name: dict[str, Principal] = {}

    def find(self, secret: bytes) -> Principal | None:
        """The named key `secret` is, or None. Looked up by its hash: a timing difference
        could only tell bits of a SHA-256 of 256 random bits, which open nothing."""
        if not self.by_hash or not secret.startswith(_PREFIX):
            return None
        return self.by_hash.get(key_hash(secret))

    @staticmethod
    def looks_named(secret: bytes) -> bool:
        """Whether `secret` has a named key's form (its prefix): worth reading the keys again
        for before it is refused."""
        return secret.startswith(_PREFIX)

    def holds(self, principal: Principal) -> bool:
        """Whether `principal` is still a key here, the same key with the same role (a UI
        session made by a key ends when the key is revoked, or rotated under its name)."""
        return self.by_name.get(principal.name) == principal

    def take(self, version: int, records: list[KeyRecord] | None) -> None:
        """KEYRING's answer: the keys, when they changed since `self.version`."""
        self.version = version
        if records is None:
            return
        self.by_hash = {r.hash: principal(r) for r in records}
        self.by_name = {p.name: p for p in self.by_hash.values()}

    async def refresh(self, store: Store) -> None:
        self.take(*await store.run(access.keyring(self.version)))

    async def keep_fresh(self, store: Store, every_secs: float) -> None:
        """`refresh` every `every_secs`, until cancelled; a failed look is logged and tried
        again at the next (the copy held goes on serving meanwhile)."""
        failing = False
        while True:
            try:
                await self.refresh(store)
                failing = False
            except RedisError as exc:
                if not failing:
                    log.warning("named keys not read again (kept as they were): %s", exc)
                failing = True
            await asyncio.sleep(every_secs)


def principal(record: KeyRecord) -> Principal:
    """Who a call made with the key of `record` is."""
    return Principal(record.name, record.role, key_id(record.hash), tuple(record.namespaces))

"""The namespaces' quotas in the snapshot file (docs/GUIDE.md, Quotas): table `quotas`
(namespace as stored, "" the default's; quota: its JSON as Redis holds it), the whole hash
written in one transaction under the snapshot's lock whenever it changed, and put back by a
restore, so a Redis that lost its data does not lift every team's limits. A file from
before quotas has no table: it restores with none.

Whether it changed is a count, as for the drains (tables.py CountedHash): SET_QUOTA adds one
to `Keys.quotas_changes`'s `made`. A restore puts the file's quotas back only into a Redis
holding none (one set since is the admin's latest word)."""

from __future__ import annotations

from scheduler.snapshot.tables import CountedHash

QUOTAS = CountedHash(
    table="quotas",
    create="CREATE TABLE IF NOT EXISTS quotas (namespace TEXT PRIMARY KEY, quota TEXT NOT NULL)",
    select="SELECT namespace, quota FROM quotas",
    what="quota(s)",
    hash_of=lambda keys: keys.quotas,
    changes_of=lambda keys: keys.quotas_changes,
    into_empty_only=True,
)
write_changes, restore = QUOTAS.write_changes, QUOTAS.restore

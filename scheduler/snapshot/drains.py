"""The drains in the snapshot file (docs/GUIDE.md, Drain): table `drains` (node, drained_by), the
whole drained hash written in one transaction under the snapshot's lock whenever it changed,
and put back by a restore, so a Redis that lost its data does not forget a node an operator
drained for maintenance. A file from before drains has no table: it restores with none.

Whether it changed is a count (tables.py CountedHash): the drain scripts add one to
`Keys.drained_changes`'s `made` with every change (drains.lua `set_drain`, `lift_drain`). A
restore puts the file's drains beside any Redis holds."""

from __future__ import annotations

from scheduler.snapshot.tables import CountedHash

DRAINS = CountedHash(
    table="drains",
    create="CREATE TABLE IF NOT EXISTS drains (node TEXT PRIMARY KEY, drained_by TEXT NOT NULL)",
    select="SELECT node, drained_by FROM drains",
    what="drained node(s)",
    hash_of=lambda keys: keys.drained_nodes,
    changes_of=lambda keys: keys.drained_changes,
)
write_changes, restore = DRAINS.write_changes, DRAINS.restore

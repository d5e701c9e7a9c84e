"""Where a deployment spread over S shards keeps each job and node (docs/ARCHITECTURE.md,
"Shards"): pure functions, so every process finds a shard with no lookup. A shard is a whole
deployment of its own under its own hash tag (config/shards.py names them; shard 0's is the
unsharded layout, so S=1 is the layout of every version before and an upgrade to S > 1 moves
nothing).

Job ids stay `job-N`: shard k draws N = counter x S + k, so N mod S names the shard. Jobs
made before the upgrade to S > 1 keep their ids: those up to the recorded `floor` (shard 0's
highest number not a multiple of S then: store/shard_layout.py) are shard 0's. A node
belongs to the shard its id ranks first for (rendezvous hashing): nodes spread evenly, and a
node's shard depends on its id and S alone (but for the nodes kept on shard 0 at the upgrade).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from scheduler.config import Settings
from scheduler.models.job import job_number
from scheduler.nodes.placement import Placement


def _rank(name: str, shard: int) -> bytes:
    return hashlib.blake2b(f"{shard}:{name}".encode(), digest_size=8).digest()


def node_shard(node_id: str, count: int) -> int:
    """The shard that holds node `node_id`: the one that ranks it highest (rendezvous)."""
    if count == 1:
        return 0
    return max(range(count), key=lambda k: _rank(node_id, k))


def key_order(key: str, count: int) -> list[int]:
    """The shards an idempotency key's job is tried on, in an order of the key's own (the
    same at every replay) that spreads keys evenly over the shards."""
    return sorted(range(count), key=lambda k: _rank(key, k), reverse=True)


# The mark of an idempotency key a shard passed on to a later shard (store/shard_placement.py).
ELSEWHERE = "-"
# The layout record's field of a node kept on shard 0: node:<id> (scripts/layout.py).
PINNED = "node:"
# A service's id: svc-N, N drawn as a job's (Numbering).
SERVICE_ID_PREFIX = "svc-"


@dataclass(frozen=True, slots=True)
class Numbering:
    """How a shard draws job (or service) numbers: N = counter x `count` + `index`, its
    counter kept above `floor` in the same script (so a shard whose Redis came back empty
    still draws numbers above every id made before, and never one another shard's)."""

    count: int = 1
    index: int = 0
    floor: int = 0

    @classmethod
    def served(cls, settings: Settings) -> Numbering:
        """The numbering of the shard a process serves (SCHEDULER_SHARD), its floor not
        known yet (a sharded store sets it from the layout record: shard_layout.py)."""
        return cls(settings.shards, settings.shard)


UNSHARDED = Numbering()


@dataclass(frozen=True, slots=True)
class Layout:
    """How a deployment is sharded: `count` shards; job numbers up to `floor` (made before it
    was sharded) are shard 0's, and so are the `pinned` nodes (those shard 0 knew then)."""

    count: int = 1
    floor: int = 0
    pinned: frozenset[str] = frozenset()

    def node_shard(self, node_id: str) -> int:
        """A node's shard: shard 0 for one registered before the deployment was sharded."""
        return 0 if node_id in self.pinned else node_shard(node_id, self.count)

    def among(self, placement: Placement, shard: int) -> Placement | None:
        """`placement` on one shard: its candidates that are the shard's nodes (None: none)."""
        if placement.mode == "live":
            return placement
        mine = tuple(n for n in placement.candidates if self.node_shard(n) == shard)
        return Placement(placement.mode, mine) if mine else None

    def job_shard(self, job_id: str) -> int:
        """The shard holding `job_id`; shard 0 for an id that is not `job-N` (which none but
        a row of an old snapshot file has: they were all made unsharded)."""
        return self.number_shard(job_number(job_id) or 0)

    def number_shard(self, number: int) -> int:
        return 0 if number <= self.floor else number % self.count

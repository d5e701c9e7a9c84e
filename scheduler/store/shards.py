"""Where a deployment spread over S shards keeps each job and node (docs/ARCHITECTURE.md,
"Shards"): pure functions of the settings, so every process finds a shard with no lookup.

A shard is a whole deployment of its own under its own hash tag: its keys (keys.py) under
`{P}` for shard 0, the layout of an unsharded deployment, so S=1 is today's layout and an
upgrade to S > 1 moves nothing; shard k > 0 under `{P-i}`, i the first number whose tag's
Redis Cluster slot lies near the middle of the k-th of S equal slot ranges counted from
shard 0's. A cluster whose primaries own equal runs of slots (as `redis-cli --cluster
create` makes them) so holds S/primaries shards on each primary.

Job ids stay `job-N`: shard k draws N = counter x S + k, so N mod S names the shard. Jobs
made before the upgrade to S > 1 keep their ids: those up to the recorded `floor` (the
counter of the unsharded deployment then) are shard 0's. A node belongs to the shard its id
ranks first for (rendezvous hashing): nodes spread evenly, and a node's shard depends on its
id and S alone.
"""

from __future__ import annotations

import binascii
import hashlib
from dataclasses import dataclass

from scheduler.models.job import job_number

SLOTS = 16384  # Redis Cluster's hash slots
MAX_SHARDS = 256


def key_slot(tag: str) -> int:
    """The Redis Cluster slot of a key whose hash tag holds `tag` (CRC16/XMODEM, which is
    binascii's crc_hqx from 0, modulo the slots: the cluster specification's)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


def _distance(a: int, b: int) -> int:
    gap = abs(a - b)
    return min(gap, SLOTS - gap)


def shard_prefixes(prefix: str, count: int) -> list[str]:
    """Each shard's REDIS_PREFIX: `prefix` for shard 0, `prefix-i` for the others (module
    docstring: each near the middle of its own share of the slots)."""
    width = SLOTS // count
    first = key_slot(prefix) // width
    found, taken, suffix = [prefix], {key_slot(prefix)}, 0
    for k in range(1, count):
        target = ((first + k) * width + width // 2) % SLOTS
        while True:
            candidate = f"{prefix}-{suffix}"
            slot = key_slot(candidate)
            suffix += 1
            if _distance(slot, target) <= width // 4 and slot not in taken:
                found.append(candidate)
                taken.add(slot)
                break
    return found


def node_shard(node_id: str, count: int) -> int:
    """The shard that holds node `node_id`: the one that ranks it highest (rendezvous)."""
    if count == 1:
        return 0

    def rank(k: int) -> bytes:
        return hashlib.blake2b(f"{k}:{node_id}".encode(), digest_size=8).digest()

    return max(range(count), key=rank)


def key_shard(key: str, count: int) -> int:
    """The shard an idempotency key's job is made on, so a replay finds what it made."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True, slots=True)
class Layout:
    """How a deployment is sharded: `count` shards; job numbers up to `floor` (made before it
    was sharded) are shard 0's."""

    count: int = 1
    floor: int = 0

    def job_shard(self, job_id: str) -> int:
        """The shard holding `job_id`; shard 0 for an id that is not `job-N` (which none but
        a row of an old snapshot file has: they were all made unsharded)."""
        number = job_number(job_id)
        if number is None or number <= self.floor:
            return 0
        return number % self.count

    def number_shard(self, number: int) -> int:
        return 0 if number <= self.floor else number % self.count


def shard_db(path: str, shard: int) -> str:
    """Shard `shard`'s snapshot file: SCHEDULER_DB itself for shard 0, else the same name with
    `-k` before its suffix (each shard snapshots and restores on its own)."""
    if shard == 0 or path == ":memory:":
        return path
    stem, dot, suffix = path.rpartition(".")
    if not dot or "/" in suffix:
        return f"{path}-{shard}"
    return f"{stem}-{shard}.{suffix}"

"""The names of a deployment's shards (store/shards.py places jobs and nodes on them): shard
0 keeps REDIS_PREFIX and SCHEDULER_DB, the unsharded layout; shard k > 0 is `{P-i}`, i the
first number whose tag's Redis Cluster slot lies near the middle of the k-th of S equal runs
of slots counted from shard 0's, and its file is `scheduler-k.db`. A cluster whose primaries
own equal runs of slots (as `redis-cli --cluster create` makes them) so holds S/primaries
shards on each primary, with no configuration.
"""

from __future__ import annotations

import binascii
import functools

SLOTS = 16384  # Redis Cluster's hash slots
MAX_SHARDS = 256


def key_slot(tag: str) -> int:
    """The Redis Cluster slot of a key whose hash tag holds `tag` (CRC16/XMODEM, which is
    binascii's crc_hqx from 0, modulo the slots: the cluster specification's)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


def _distance(a: int, b: int) -> int:
    gap = abs(a - b)
    return min(gap, SLOTS - gap)


@functools.lru_cache(maxsize=64)
def shard_prefixes(prefix: str, count: int) -> tuple[str, ...]:
    """Each shard's REDIS_PREFIX: `prefix` for shard 0, `prefix-i` for the others (module
    docstring)."""
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
    return tuple(found)


def shard_db(path: str, shard: int) -> str:
    """Shard `shard`'s snapshot file: SCHEDULER_DB itself for shard 0, else the same name with
    `-k` before its suffix (each shard snapshots and restores on its own)."""
    if shard == 0 or path == ":memory:":
        return path
    stem, dot, suffix = path.rpartition(".")
    if not dot or "/" in suffix:
        return f"{path}-{shard}"
    return f"{stem}-{shard}.{suffix}"

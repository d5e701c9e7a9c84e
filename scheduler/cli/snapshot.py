"""`scheduler snapshot` and `scheduler restore --from FILE`: the SQLite snapshot by hand."""

from __future__ import annotations

import argparse
import sys

from redis.exceptions import RedisError

from scheduler.config import Settings
from scheduler.snapshot.db import SnapshotFileError
from scheduler.snapshot.restore import RestoreRefused, restore_from_file
from scheduler.snapshot.writer import write_snapshot


def _snapshot(args: argparse.Namespace, settings: Settings) -> int:
    try:
        written = write_snapshot(settings, wait=True)
    except (RestoreRefused, RedisError, SnapshotFileError) as exc:
        print(f"scheduler snapshot: not written: {exc}", file=sys.stderr)
        return 1
    print(f"snapshot: {written} changed jobs written to {settings.scheduler_db}")
    return 0


def _restore(args: argparse.Namespace, settings: Settings) -> int:
    try:
        report = restore_from_file(settings, args.source, force=args.force)
    except (FileNotFoundError, SnapshotFileError, RestoreRefused, RedisError) as exc:
        print(f"scheduler restore: {exc}", file=sys.stderr)
        return 1
    print(
        f"restored {report.jobs} jobs from {report.source} "
        f"(prefix {settings.redis_prefix!r}, next id job-{report.highest_job_number + 1} "
        "or above)"
    )
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snap = sub.add_parser(
        "snapshot", help="write the jobs changed since the last snapshot to SCHEDULER_DB now"
    )
    snap.set_defaults(handler=_snapshot)
    restore = sub.add_parser(
        "restore",
        help="load every job of a SQLite snapshot file (ours or the Go scheduler's) into Redis",
        description="Load every job of FILE into Redis under REDIS_PREFIX, with all indexes, "
        "and raise the id counter to its highest job-N. Refuses when Redis already holds jobs, "
        "unless --force.",
    )
    restore.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="FILE",
        help="the SQLite snapshot file (ours or the Go scheduler's)",
    )
    restore.add_argument(
        "--force",
        action="store_true",
        help="load even if Redis holds jobs: the file's jobs replace those with the same id, "
        "the others stay, the id counter never goes down",
    )
    restore.set_defaults(handler=_restore)

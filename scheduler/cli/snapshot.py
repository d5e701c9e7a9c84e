"""`scheduler snapshot` and `scheduler restore --from FILE`: the SQLite snapshot by hand, of
one shard (`--shard`) of a sharded deployment: REDIS_URL's, else the one `scheduler up` runs
(deployment.py), else neither is done."""

from __future__ import annotations

import argparse
import sys

from redis.exceptions import RedisError

from scheduler.cli.deployment import Deployment, NoDeployment, add_data_dir_option, deployment
from scheduler.cli.shard import add_shard_option, with_shard
from scheduler.config import ConfigError, Settings
from scheduler.snapshot.db import SnapshotFileError
from scheduler.snapshot.layout import check_layout
from scheduler.snapshot.restore import RestoreRefused, restore_from_file
from scheduler.snapshot.writer import write_snapshot
from scheduler.store.errors import LayoutChanged


def _found(args: argparse.Namespace, settings: Settings, command: str) -> Deployment | None:
    """The deployment REDIS_URL or `up` names; None after telling why none (exit 2)."""
    try:
        return deployment(settings, args.data_dir)
    except NoDeployment as exc:
        print(f"scheduler {command}: {exc}", file=sys.stderr)
        return None


def _served(args: argparse.Namespace, found: Deployment, command: str) -> Settings | None:
    """The shard's settings, once the deployment's shard count is checked (as a worker's
    start checks it: another count's shards are not this deployment's); None after telling
    why not (exit 2)."""
    try:
        settings = with_shard(found.settings, args.shard)
        check_layout(settings)
    except (ConfigError, LayoutChanged) as exc:
        print(f"scheduler {command}: {exc}", file=sys.stderr)
        return None
    return settings.served()


def _snapshot(args: argparse.Namespace, settings: Settings) -> int:
    found = _found(args, settings, "snapshot")
    if found is None:
        return 2
    try:
        served = _served(args, found, "snapshot")
        if served is None:
            return 2
        written = write_snapshot(served, wait=True)
    except RedisError as exc:
        print(f"scheduler snapshot: not written: {exc}{found.unreachable()}", file=sys.stderr)
        return 1
    except (RestoreRefused, SnapshotFileError) as exc:
        print(f"scheduler snapshot: not written: {exc}", file=sys.stderr)
        return 1
    print(f"snapshot: {written} changed jobs written to {served.scheduler_db} ({found.said()})")
    return 0


def _restore(args: argparse.Namespace, settings: Settings) -> int:
    found = _found(args, settings, "restore")
    if found is None:
        return 2
    try:
        served = _served(args, found, "restore")
        if served is None:
            return 2
        report = restore_from_file(served, args.source, force=args.force)
    except LayoutChanged as exc:  # the file is another count's
        print(f"scheduler restore: {exc}", file=sys.stderr)
        return 2
    except RedisError as exc:
        print(f"scheduler restore: {exc}{found.unreachable()}", file=sys.stderr)
        return 1
    except (FileNotFoundError, SnapshotFileError, RestoreRefused) as exc:
        print(f"scheduler restore: {exc}", file=sys.stderr)
        return 1
    print(
        f"restored {report.jobs} jobs from {report.source} "
        f"(prefix {served.redis_prefix!r}, next id job-{report.highest_job_number + 1} "
        f"or above; {found.said()})"
    )
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snap = sub.add_parser(
        "snapshot", help="write the jobs changed since the last snapshot to SCHEDULER_DB now"
    )
    add_shard_option(snap, "whose changed jobs are written, to its own file")
    add_data_dir_option(snap)
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
    add_shard_option(restore, "the file's jobs are loaded into (the file must be its)")
    add_data_dir_option(restore)
    restore.set_defaults(handler=_restore)

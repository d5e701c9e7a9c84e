"""`scheduler worker`: the background work (timeout sweep, SQS ingestion, SNS publishing,
snapshot) as an rq worker; run as many as you like (workers/), in a sharded deployment at
least one for each shard (--shard or SCHEDULER_SHARD)."""

from __future__ import annotations

import argparse
import os
import sys

from scheduler.cli.shard import add_shard_option, with_shard
from scheduler.config import ConfigError, Settings
from scheduler.store.errors import LayoutChanged

KINDS = ("periodic", "events")  # workers.queues.KINDS, without importing rq to build the CLI


def _kinds(raw: str) -> list[str]:
    kinds = [kind.strip() for kind in raw.split(",") if kind.strip()]
    unknown = [kind for kind in kinds if kind not in KINDS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"use a comma-separated subset of {','.join(KINDS)}")
    return kinds


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    try:
        settings = with_shard(settings, args.shard)
        if args.shard is not None:
            # Where workers/ reads it, as it fixes rq's key prefix below.
            os.environ["SCHEDULER_SHARD"] = str(args.shard)
        # Importing workers/ fixes rq's key prefix from REDIS_PREFIX and the shard's
        # (workers/rq_prefix.py).
        from workers.rq_prefix import check_rq_prefix
        from workers.worker import run

        check_rq_prefix(settings.served())
    except ConfigError as exc:
        print(f"scheduler: configuration error: {exc}", file=sys.stderr)
        return 2

    # run() checks the shard count and settles the snapshot restore before taking any work.
    try:
        return run(settings, kinds=args.queues, burst=args.burst, rq_log_level=args.rq_log_level)
    except LayoutChanged as exc:
        print(f"scheduler worker: {exc}", file=sys.stderr)
        return 2


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = sub.add_parser("worker", help="run an rq worker: sweep, SQS, SNS, snapshot")
    worker.add_argument(
        "--queues",
        type=_kinds,
        default=list(KINDS),
        help="which of the queues to work on (default: periodic,events; periodic first)",
    )
    add_shard_option(worker, "this worker serves")
    worker.add_argument(
        "--burst", action="store_true", help="fire the current periods once, work, then exit"
    )
    worker.add_argument(
        "--rq-log-level", default="WARNING", help="rq's own log level (INFO logs every job)"
    )
    worker.set_defaults(handler=_worker)

"""`--shard k`, of the commands that work on one shard of a sharded deployment (`worker`,
`snapshot`, `restore`: docs/DEPLOYMENT.md, Shards): which shard, and the settings it gives."""

from __future__ import annotations

import argparse
import dataclasses

from scheduler.config import Settings


def _shard(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return value


def add_shard_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--shard",
        type=_shard,
        default=None,
        help=f"the shard {what}, below SCHEDULER_SHARDS (default $SCHEDULER_SHARD or 0; "
        "docs/DEPLOYMENT.md, Shards)",
    )


def with_shard(settings: Settings, shard: int | None) -> Settings:
    """The deployment's settings with `--shard` when given (validated: ConfigError for one
    beyond the deployment's); Settings.served() is then that shard's."""
    if shard is None:
        return settings
    chosen = dataclasses.replace(settings, shard=shard)
    chosen.validate()
    return chosen

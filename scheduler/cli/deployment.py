"""Which deployment the operator's commands that talk to Redis themselves (`snapshot`,
`restore`) work on: REDIS_URL's when it is set; else the one `scheduler up` runs with the
data dir `--data-dir` (default `data`, up's own default, so `./dev snapshot` finds `./dev
up`), whose Redis URL up keeps in <data-dir>/redis/url; else none, and they refuse naming
both. Never Settings' default 127.0.0.1:6379 unasked: a snapshot of some other Redis
printed `0 changed jobs written` and looked like success.

The snapshot file follows the Redis: SCHEDULER_DB, or with up's Redis (SCHEDULER_DB unset)
the data dir's scheduler.db, where up's own worker snapshots."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from scheduler.config import ConfigError, Settings, parse_redis_url
from scheduler.config.redis_url import redact

DEFAULT_DATA_DIR = "data"  # `scheduler up`'s (so ./dev up's: ./data)


def url_file(data_dir: Path) -> Path:
    """Where `up` keeps its embedded Redis's URL (with the password; its user's only)."""
    return data_dir / "redis" / "url"


def snapshot_file(data_dir: Path, environ: Mapping[str, str] = os.environ) -> str:
    """The deployment's snapshot file: SCHEDULER_DB, else (unset or empty) the data dir's
    scheduler.db. up's children snapshot and restore there, and its check of the shard count
    reads the same file."""
    return environ.get("SCHEDULER_DB", "") or str(data_dir / "scheduler.db")


class NoDeployment(Exception):
    """No Redis was named: the message says what to set."""


@dataclass(frozen=True, slots=True)
class Deployment:
    settings: Settings  # with its Redis and snapshot file
    source: str  # where its Redis URL came from: REDIS_URL, or up's file
    from_up: bool

    def said(self) -> str:
        """Which Redis, for the command's last line: the URL without its password."""
        return f"Redis {redact(self.settings.redis_url)} from {self.source}"

    def unreachable(self) -> str:
        """What to check when that Redis does not answer."""
        if self.from_up:
            return f" (is the `scheduler up` that wrote {self.source} running?)"
        return ""


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help="with REDIS_URL unset: the Redis of the `scheduler up` with this data dir "
        f"(default {DEFAULT_DATA_DIR}, up's), from DIR/redis/url",
    )


def deployment(
    settings: Settings, data_dir: str, environ: Mapping[str, str] = os.environ
) -> Deployment:
    """REDIS_URL's deployment, else the one of the `up` with `data_dir`; NoDeployment when
    neither is there."""
    if environ.get("REDIS_URL", "") != "":
        return Deployment(settings, "REDIS_URL", from_up=False)
    where = Path(data_dir).resolve()
    path = url_file(where)
    try:
        url = path.read_text().strip()
    except FileNotFoundError:
        raise NoDeployment(
            f"which Redis? REDIS_URL is unset and no `scheduler up` keeps its Redis in "
            f"{where} ({path} does not exist): set REDIS_URL to the deployment's Redis, "
            "or --data-dir to the data dir of the `scheduler up` to use"
        ) from None
    except OSError as exc:
        raise NoDeployment(f"cannot read {path}: {exc}; or set REDIS_URL") from None
    try:
        parse_redis_url(url)
    except ConfigError:
        raise NoDeployment(f"{path} holds no Redis URL: set REDIS_URL, or start up") from None
    chosen = replace(settings, redis_url=url, scheduler_db=snapshot_file(where, environ))
    return Deployment(chosen, str(path), from_up=True)

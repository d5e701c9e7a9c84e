"""rq's keys in the deployment's hash tag: RQ_KEY_PREFIX = "{REDIS_PREFIX}:rq" (store/keys.py);
in a sharded deployment, the hash tag of the shard the worker serves (SCHEDULER_SHARD), so a
shard's rq work lives on its own Redis Cluster primary with the rest of the shard.

rq reads RQ_KEY_PREFIX once, when rq.defaults is first imported, and builds every key from it
(queues, jobs, registries, workers). So `workers/__init__.py` calls `pin_rq_prefix` before any
module here imports rq: it imports rq.defaults with the variable set from REDIS_PREFIX, then
puts the environment back (test processes run deployments of many prefixes; their children
derive their own). A conflicting RQ_KEY_PREFIX set by the operator stops the process: rq would
keep its work in another slot, where a Redis Cluster refuses it and a dashboard looks in vain.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, MutableMapping

from scheduler.config import ConfigError, Settings
from scheduler.store.keys import Keys

ENV = "RQ_KEY_PREFIX"
# What names the served shard's prefix (Settings.for_shard), read before the other settings.
SHARD_ENV = ("REDIS_PREFIX", "SCHEDULER_SHARDS", "SCHEDULER_SHARD")


def served_prefix(environ: Mapping[str, str]) -> str:
    """The REDIS_PREFIX of the shard the environment's worker serves (REDIS_PREFIX itself
    unsharded), read as `Settings.from_env` reads it; ConfigError as from_env raises."""
    settings = Settings.from_env({name: environ.get(name, "") for name in SHARD_ENV})
    return settings.served().redis_prefix


def wanted_rq_prefix(environ: Mapping[str, str]) -> str:
    """The RQ_KEY_PREFIX the environment's REDIS_PREFIX (and shard) gives; ConfigError when the
    environment sets RQ_KEY_PREFIX to anything else (or REDIS_PREFIX is invalid)."""
    wanted = Keys(served_prefix(environ)).rq_prefix
    given = environ.get(ENV, "")
    if given not in ("", wanted):
        raise ConfigError(
            f"{ENV}: {given!r} differs from {wanted!r}, which REDIS_PREFIX gives; unset "
            f"{ENV} (the scheduler sets it so rq's keys share the deployment's hash tag)"
        )
    return wanted


def pin_rq_prefix(environ: MutableMapping[str, str] = os.environ) -> str:
    """Import rq's defaults with RQ_KEY_PREFIX from `environ`; returns the prefix rq uses."""
    wanted = wanted_rq_prefix(environ)
    loaded = sys.modules.get("rq.defaults")
    if loaded is None:
        before = environ.get(ENV)
        environ[ENV] = wanted
        try:
            loaded = importlib.import_module("rq.defaults")
        finally:
            if before is None:
                del environ[ENV]
            else:
                environ[ENV] = before
    used: str = loaded.RQ_KEY_PREFIX
    if used != wanted:
        raise ConfigError(f"{ENV}: rq was imported with {used!r} before workers/ set {wanted!r}")
    return used


def check_rq_prefix(settings: Settings) -> None:
    """At a worker process's start: rq keeps its keys where the settings' deployment (the
    served shard's settings, Settings.for_shard) does."""
    from rq.defaults import RQ_KEY_PREFIX

    wanted = Keys(settings.redis_prefix).rq_prefix
    if wanted != RQ_KEY_PREFIX:
        raise ConfigError(f"{ENV}: rq uses {RQ_KEY_PREFIX!r}, REDIS_PREFIX gives {wanted!r}")

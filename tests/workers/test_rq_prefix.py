"""rq's keys carry the deployment's hash tag: RQ_KEY_PREFIX comes from REDIS_PREFIX, set before
rq is imported (workers/rq_prefix.py), and an operator's conflicting one stops the process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import rq.defaults
from rq.job import Job
from rq.queue import Queue
from rq.registry import FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

from scheduler.config import ConfigError, redis_prefix_from_env
from scheduler.store.keys import Keys
from workers.rq_prefix import pin_rq_prefix, wanted_rq_prefix


def test_this_process_runs_rq_with_the_prefix_of_its_redis_prefix() -> None:
    wanted = Keys(redis_prefix_from_env(os.environ)).rq_prefix
    assert wanted == rq.defaults.RQ_KEY_PREFIX
    assert pin_rq_prefix({}) == wanted if not os.environ.get("REDIS_PREFIX") else True


def test_the_keys_named_by_keys_py_are_rqs_own() -> None:
    """The upgrade and the process tests name rq's keys through Keys.rq_key: they must be the
    names rq uses (checked with this process's prefix, the one rq was imported with)."""
    keys = Keys(redis_prefix_from_env(os.environ))
    name = keys.rq_queue("events")
    fake = object()
    assert Queue(name, connection=fake).key == keys.rq_key("queue", name)  # type: ignore[arg-type]
    assert Job.key_for("x-event-1") == keys.rq_key("job", "x-event-1")
    for registry, kind in (
        (StartedJobRegistry, "wip"),
        (ScheduledJobRegistry, "scheduled"),
        (FailedJobRegistry, "failed"),
    ):
        assert registry(name, connection=fake).key == keys.rq_key(kind, name)  # type: ignore[arg-type]
    assert Queue.redis_queues_keys == keys.rq_queues


@pytest.mark.parametrize(
    "env, wanted",
    [
        ({}, "{sched}:rq"),
        ({"REDIS_PREFIX": "eu.prod-1"}, "{eu.prod-1}:rq"),
        ({"REDIS_PREFIX": "eu", "RQ_KEY_PREFIX": "{eu}:rq"}, "{eu}:rq"),
        ({"REDIS_PREFIX": "eu", "RQ_KEY_PREFIX": ""}, "{eu}:rq"),
    ],
)
def test_wanted_prefix(env: dict[str, str], wanted: str) -> None:
    assert wanted_rq_prefix(env) == wanted


@pytest.mark.parametrize("given", ["rq", "{sched}:rq", "{eu}"])
def test_a_conflicting_rq_key_prefix_is_refused(given: str) -> None:
    with pytest.raises(ConfigError) as err:
        wanted_rq_prefix({"REDIS_PREFIX": "eu", "RQ_KEY_PREFIX": given})
    assert "RQ_KEY_PREFIX" in str(err.value) and given in str(err.value)


def test_rq_imported_with_another_prefix_is_refused() -> None:
    """Here rq was imported already, with this process's prefix: another deployment's is
    refused (a module importing rq before workers/ would be caught this way)."""
    with pytest.raises(ConfigError, match="RQ_KEY_PREFIX"):
        pin_rq_prefix({"REDIS_PREFIX": "another-deployment"})


@pytest.mark.parametrize("command", [["worker", "--burst"], ["up", "--port", "1"]])
def test_the_commands_stop_on_a_conflicting_rq_key_prefix(
    command: list[str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "RQ_"))}
    env.update(REDIS_URL="redis://127.0.0.1:1/0", REDIS_PREFIX="eu", RQ_KEY_PREFIX="rq")
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", *command],
        env=env,
        cwd=tmp_path,  # `up` makes its data directory here
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "configuration error: RQ_KEY_PREFIX: 'rq' differs from '{eu}:rq'" in done.stderr

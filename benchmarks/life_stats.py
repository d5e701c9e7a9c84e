"""What the life benchmarks (life_cost.py, shard_cost.py) read of a Redis: its CPU (INFO cpu),
its time in commands (INFO commandstats since CONFIG RESETSTAT) and its idle draw, per
subject and phase of their rounds (timing.py cuts a phase into turns)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass

import redis

IDLE_SECS = 2.0  # each Redis's idle draw, measured once a round


@dataclass(frozen=True)
class Sample:
    """`count` operations of one subject: µs in scripts, in every command, of Redis CPU
    (all threads; the main one), idle included, and the seconds they lasted."""

    count: int
    scripts: float
    every: float
    cpu: float
    main: float
    wall: float

    def __add__(self, other: Sample) -> Sample:
        return Sample(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def cpu(client: redis.Redis) -> tuple[float, float]:
    """Redis's CPU seconds: every thread's, the main thread's (nan where not reported)."""
    info = client.info("cpu")
    total = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    if "used_cpu_user_main_thread" not in info:
        return total, float("nan")
    main = float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
    return total, main


def command_usec(client: redis.Redis) -> tuple[float, float]:
    """µs since CONFIG RESETSTAT in scripts (every eval*, evalsha* and fcall* entry: the
    commands a script calls run inside its time) and in every command but the benchmark's
    own INFO and CONFIG (a script's inner commands so count twice)."""
    stats = client.info("commandstats")
    scripts = sum(
        float(entry["usec"])
        for name, entry in stats.items()
        if name.startswith(("cmdstat_eval", "cmdstat_fcall"))
    )
    every = sum(
        float(entry["usec"])
        for name, entry in stats.items()
        if not name.startswith(("cmdstat_info", "cmdstat_config"))
    )
    return scripts, every


def sampled(clients: dict[str, redis.Redis], run: Callable[[], int]) -> dict[str, Sample]:
    """Each Redis's Sample of `run` (which answers how many operations it made), counters
    reset first."""
    for client in clients.values():
        client.config_resetstat()
    started = time.monotonic()
    before = {name: cpu(client) for name, client in clients.items()}
    count = run()
    after = {name: cpu(client) for name, client in clients.items()}
    wall = time.monotonic() - started
    samples = {}
    for name, client in clients.items():
        used = ((after[name][0] - before[name][0]) * 1e6, (after[name][1] - before[name][1]) * 1e6)
        samples[name] = Sample(count, *command_usec(client), *used, wall)
    return samples


def idle(clients: dict[str, redis.Redis]) -> dict[str, tuple[float, float]]:
    """Each Redis's CPU seconds a second with nothing sent (its cron, the quiet APIs'
    checks), all over the same seconds."""
    before = {name: cpu(client) for name, client in clients.items()}
    time.sleep(IDLE_SECS)
    after = {name: cpu(client) for name, client in clients.items()}
    return {
        name: ((after[name][0] - b[0]) / IDLE_SECS, (after[name][1] - b[1]) / IDLE_SECS)
        for name, b in before.items()
    }


@dataclass
class Figures:
    samples: dict[str, dict[str, list[Sample]]]  # subject -> phase -> one a round
    idles: dict[str, list[tuple[float, float]]]  # Redis -> one a round
    redis_of: dict[str, str]  # subject -> its Redis

    def idle_rate(self, redis_name: str) -> tuple[float, float]:
        rates = self.idles[redis_name]
        return statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)

    def values(self, subject: str, phase: str, metric: str) -> list[float]:
        """µs per operation of each round; the CPU less the Redis's idle draw over the
        phase's time (the median of the rounds' idle rates)."""
        rate, main_rate = self.idle_rate(self.redis_of[subject])
        pick: dict[str, Callable[[Sample], float]] = {
            "in scripts": lambda s: s.scripts,
            "Redis CPU": lambda s: s.cpu - rate * s.wall * 1e6,
            "Redis CPU, main": lambda s: s.main - main_rate * s.wall * 1e6,
            "all commands": lambda s: s.every,
        }
        return [pick[metric](s) / s.count for s in self.samples[subject][phase]]

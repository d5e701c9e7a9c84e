"""How the benchmarks time: subjects measured in rounds that take turns (A B, B A, ...), so
the drift of a shared machine falls on each alike; medians and ratios of those rounds; the
fastest of repeats where noise only adds time; and Redis's own time of script calls from
INFO commandstats, which the machine's load moves little."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import redis

T = TypeVar("T")
R = TypeVar("R")

PIPELINE = 1000  # calls a pipeline carries: bounded replies, few round trips


def in_turn(subjects: Sequence[T], turn: int) -> list[T]:
    """`subjects` from the `turn`-th on, round about: for two, A B then B A."""
    first = turn % len(subjects) if subjects else 0
    return [*subjects[first:], *subjects[:first]]


def rounds(subjects: Mapping[str, Callable[[], R]], count: int) -> dict[str, list[R]]:
    """`count` rounds of every subject's measure, taking turns (in_turn): each subject's
    results in round order."""
    results: dict[str, list[R]] = {name: [] for name in subjects}
    for turn in range(count):
        for name in in_turn(list(subjects), turn):
            results[name].append(subjects[name]())
    return results


def chunks(total: int, parts: int = 10) -> list[int]:
    """`total` in `parts` near-equal parts, none empty: a phase cut into turns."""
    sizes = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
    return [size for size in sizes if size]


def median(values: Iterable[float]) -> float:
    return statistics.median(values)


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def median_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The median of the rounds' ratios (each round's ours / its theirs): a round's pair was
    measured seconds apart, under the same load."""
    return statistics.median(ratio(a, b) for a, b in zip(ours, theirs, strict=True))


def best_of(repeats: int, measure: Callable[[], float]) -> float:
    """The least of `repeats` measures: on a shared machine noise only adds time."""
    return min(measure() for _ in range(repeats))


def timed(run: Callable[[], R]) -> tuple[R, float]:
    """`run`'s result and the seconds it took (wall clock)."""
    started = time.perf_counter()
    result = run()
    return result, time.perf_counter() - started


def evalsha_many(
    client: redis.Redis, root: str, text: str, arg_lists: Sequence[Sequence[Any]]
) -> list[Any]:
    """One script's calls (its text, each call's ARGV after the root key) by EVALSHA,
    pipelined; their replies."""
    sha = client.script_load(text)
    replies: list[Any] = []
    for start in range(0, len(arg_lists), PIPELINE):
        pipe = client.pipeline(transaction=False)
        for args in arg_lists[start : start + PIPELINE]:
            pipe.evalsha(sha, 1, root, *args)
        replies += pipe.execute()
    return replies


def script_usec(
    client: redis.Redis, root: str, text: str, arg_lists: Sequence[Sequence[Any]]
) -> float:
    """Redis's own µs per call of `arg_lists`' calls of the script (evalsha_many), from INFO
    commandstats reset before them: not a latency, the time Redis held every other client."""
    client.script_load(text)
    client.config_resetstat()
    evalsha_many(client, root, text, arg_lists)
    return evalsha_usec(client)


def evalsha_usec(client: redis.Redis) -> float:
    """µs per EVALSHA since the last CONFIG RESETSTAT (0 when none ran)."""
    stats: Any = client.info("commandstats")
    return float(stats.get("cmdstat_evalsha", {"usec_per_call": 0.0})["usec_per_call"])


def calls_usec(client: redis.Redis, root: str, calls: Sequence[Any]) -> float:
    """script_usec of Call objects of one script (scheduler/store/scripts)."""
    return script_usec(client, root, calls[0].script.text, [call.args for call in calls])


def commands_processed(client: redis.Redis) -> int:
    """Redis's commands since its start or CONFIG RESETSTAT (this INFO among them)."""
    stats: Any = client.info("stats")
    return int(stats["total_commands_processed"])

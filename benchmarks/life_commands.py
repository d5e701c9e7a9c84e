"""The Redis commands of one job's life, each script's calls as Redis runs them (MONITOR), and
what each kind of call costs (callgrind): the map a cheaper life (issue 40) is planned on.

    .venv/bin/python -m benchmarks.life_commands [--stored 200] [--against REF] [--list]

A life is script_instructions' calls: create, the poll that hands the job out, its report
running and its report done, on a store already holding `--stored` jobs. The table counts the
commands each call's script ran, by command; `--list` prints them in order, as MONITOR saw
them (keys and arguments cut at 100 characters). With --against, the commit REF is run the
same way in a process of its own and the counts are printed side by side, with their ratio:
unlike a time, a count does not move with the load of this shared machine.

`--units` adds what a call's pieces cost in Redis's instructions (callgrind, valgrind needed),
on functions of their own: an FCALL that does nothing (the price of any script call: reading
the request, running the function, answering), each argument more, a command of the
cheapest kind (SCARD), each argument more of a command a script sends (EXISTS of 21 keys
against SCARD's one), and a sorted set's member added, moved (a new score) and removed among
`--stored` others.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.script_instructions import BODY, Scripts, _library

STEPS = ("create", "poll", "running", "done")
# What MONITOR prints of a script's own call: its commands follow it.
SCRIPT_CALLS = ("FCALL", "EVALSHA", "EVAL")
WARM = 5
MARKER = "life-commands:"  # an ECHO after each step, which MONITOR prints after its commands


def life_calls(s: Scripts, stored: int) -> tuple[list[Callable[[], Any]], list[Callable[[], Any]]]:
    """The calls filling the store (`stored` jobs on another node, the first WARM of them
    ended: each count of the minute written once, as in a store that has been running), and
    those of one life (STEPS' order) on a node of its own."""
    from scheduler.nodes.placement import Placement

    elsewhere, here = Placement.among(["n1"]), Placement.among(["n0"])
    number = stored + 1
    running = s.update(status="running")
    done = s.update(status="done", exit_code=0, stdout="hello")

    def report(n: int, update: Any) -> Callable[[], Any]:
        return lambda: s.transition(f"job-{n}", update, 2.0, s.retries, "open", **s.ttl)

    fill = [lambda: s.create_job(BODY, elsewhere, 1.0, 30) for _ in range(stored)]
    for n in range(1, min(WARM, stored) + 1):
        fill += [report(n, running), report(n, done)]
    life = [
        lambda: s.create_job(BODY, here, 1.0, 30),
        lambda: s.poll("n0", 1, "open"),
        report(number, running),
        report(number, done),
    ]
    return fill, life


def _send(client: redis.Redis, s: Scripts, call: Any) -> None:
    _, keys, args = s.parts(call)
    function = getattr(call.script, "function", "")
    if function:
        client.fcall(function, len(keys), *keys, *args)
    else:
        client.evalsha(client.script_load(s.parts(call)[0]), len(keys), *keys, *args)


def measure(stored: int) -> dict[str, list[str]]:
    """Each step's commands, as MONITOR printed them, with the checkout first on the path."""
    s = Scripts("life")
    fill, life = life_calls(s, stored)
    seen: list[str] = []
    with harness.redis_server() as url, harness.connected(url) as client:
        client.set(s.keys.initialised, "benchmark")
        library = _library()
        if library:
            client.function_load(library, replace=True)
        for build in fill:
            _send(client, s, build())
        watching = threading.Event()
        thread = threading.Thread(target=_watch, args=(url, seen, watching), daemon=True)
        thread.start()
        watching.wait(10)
        steps: dict[str, list[str]] = {}
        for name, build in zip(STEPS, life, strict=True):
            _send(client, s, build())
            # MONITOR's lines come in order: the step's commands end at its marker.
            marker = f"ECHO {MARKER}{name}"
            client.echo(f"{MARKER}{name}")
            deadline = time.monotonic() + 60
            while marker not in seen:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"MONITOR did not show the end of {name}")
                time.sleep(0.01)
            end = seen.index(marker)
            steps[name] = [line for line in seen[:end] if not line.startswith(SCRIPT_CALLS)]
            del seen[: end + 1]
    return steps


def _watch(url: str, seen: list[str], watching: threading.Event) -> None:
    with harness.connected(url) as client, client.monitor() as monitor:  # type: ignore[no-untyped-call]
        watching.set()
        for command in monitor.listen():
            seen.append(str(command["command"]))


def counted(steps: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """Per step, the commands by name (and "all")."""
    out: dict[str, dict[str, int]] = {}
    for name, lines in steps.items():
        by_name = collections.Counter(line.split(" ", 1)[0].upper() for line in lines)
        out[name] = {"all": len(lines), **dict(sorted(by_name.items()))}
    return out


def units(stored: int) -> dict[str, float]:
    """Redis's instructions for each piece of a call (callgrind), per call."""
    argument = "x" * 8
    members = [f"job-{n}" for n in range(stored)]
    pieces: list[tuple[str, str, Callable[[int], list[str]]]] = [
        ("FCALL, nothing done", "noop", lambda n: [argument]),
        ("FCALL, 21 arguments", "noop", lambda n: [argument] * 21),
        ("SCARD", "scard", lambda n: [argument]),
        ("EXISTS of 21 keys", "exists", lambda n: [argument]),
        ("ZADD, a new member", "zadd", lambda n: [str(stored + n), f"new-{n}"]),
        ("ZADD, a new score", "zadd", lambda n: [str(2 * stored + n), f"new-{n}"]),
        ("ZREM", "zrem", lambda n: [f"new-{n}"]),
    ]
    calls = 1000
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as workdir, harness.callgrind_redis(workdir) as (c, pid):
        c.function_load(UNITS_LIBRARY, replace=True)
        for start in range(0, stored, 1000):
            c.zadd("{u}:z", {m: i for i, m in enumerate(members[start : start + 1000], start)})
        for label, function, args in pieces:
            pipe = c.pipeline(transaction=False)
            for n in range(calls):
                key = "{u}:s" if function == "scard" else "{u}:z"
                pipe.fcall(function, 1, key, *args(n))
            harness.callgrind_zero(pid)
            pipe.execute()
            figures[label] = harness.callgrind_total(pid, workdir) / calls
    base = figures["FCALL, nothing done"]
    wide = figures.pop("EXISTS of 21 keys")
    return {
        "FCALL, nothing done": base,
        "an argument more": (figures.pop("FCALL, 21 arguments") - base) / 20,
        **{label: figure - base for label, figure in list(figures.items())[1:]},
        "a command's argument more": (wide - figures["SCARD"]) / 20,
    }


UNITS_LIBRARY = """#!lua name=life_units
redis.register_function('noop', function(KEYS, ARGV) return 1 end)
redis.register_function('scard', function(KEYS, ARGV) return redis.call('SCARD', KEYS[1]) end)
redis.register_function('exists', function(KEYS, ARGV)
  local k = KEYS[1]
  return redis.call('EXISTS', k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k) end)
redis.register_function('zadd', function(KEYS, ARGV)
  return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) end)
redis.register_function('zrem', function(KEYS, ARGV)
  return redis.call('ZREM', KEYS[1], ARGV[1]) end)
"""


def measured(stored: int, code: Any = harness.ROOT) -> dict[str, list[str]]:
    """`measure` in a process of its own on the checkout at `code`."""
    out = harness.run_module("life_commands", "--measure", "--stored", str(stored), code=code)
    steps: dict[str, list[str]] = json.loads(out.splitlines()[-1])
    return steps


def print_counts(
    ours: dict[str, dict[str, int]], theirs: dict[str, dict[str, int]], ref: str
) -> None:
    columns = [Column("commands", "8d")]
    if theirs:
        columns += [Column(ref, "8d"), Column("ratio", "6.2f")]
    table = Table(*columns, label_width=32)
    table.header()
    for step in STEPS:
        names = sorted(set(ours[step]) | set(theirs.get(step, {})), key=lambda n: (n != "all", n))
        for name in names:
            mine, before = ours[step].get(name, 0), theirs.get(step, {}).get(name)
            label = f"{step}, {name}"
            table.row(
                label,
                mine,
                *([] if before is None else [before, mine / before if before else None]),
            )
    life = sum(ours[step]["all"] for step in STEPS)
    if theirs:
        before = sum(theirs[step]["all"] for step in STEPS)
        table.row("life, all", life, before, life / before)
    else:
        table.row("life, all", life)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=200, help="jobs in the store before the life")
    parser.add_argument("--against", default="", metavar="REF", help="a commit to compare")
    parser.add_argument("--list", action="store_true", help="print each step's commands in order")
    parser.add_argument("--units", action="store_true", help="what each piece of a call costs")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.stored)))
        return 0
    ours = measured(args.stored)
    theirs: dict[str, list[str]] = {}
    if args.against:
        with harness.checkout(args.against) as other:
            theirs = measured(args.stored, other)
    if args.list:
        for step in STEPS:
            print(f"-- {step}")
            for line in ours[step]:
                print("  " + line[:100])
    print_counts(counted(ours), counted(theirs) if theirs else {}, args.against)
    if args.units:
        table = Table(Column("instructions", "10.0f"), label_width=32)
        table.header()
        for label, figure in units(args.stored).items():
            table.row(label, figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())

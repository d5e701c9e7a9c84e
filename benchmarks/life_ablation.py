"""What each part of a job's life costs Redis, by taking it out: the life (create, the poll,
running, done) counted by callgrind with the scripts' library as it is, then with one part of
it cut out of the library's text at a time, so a part's figure is everything it costs
(its commands, their keys and arguments, the Lua around them, the garbage they leave).

    .venv/bin/python -m benchmarks.life_ablation [--stored 300] [--lives 20] [--parts a,b]

Each variant runs in a redis-server of its own under callgrind (valgrind needed) holding
`--stored` jobs of another node, then `--lives` jobs through their life on a node of their
own, a phase at a time (every create, every poll, every report running, every report done:
script_instructions' way), each phase's instructions divided by the lives. A variant is the
library's text with rewrites (VARIANTS); each rewrite must match, so a change of the
scripts that a variant no longer fits stops the run rather than measuring nothing.

A variant is not a version that works: without its indexes a poll finds no job, without its
events an ending has no outbox number. It answers one question, what would a life cost
without that part, which is what a redesign of that part can save at most (issue 40's
"a cheaper life"; docs/PERFORMANCE.md). Unlike a time, a count does not move with the load
of this shared machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from benchmarks import harness
from benchmarks.life_commands import STEPS
from benchmarks.report import Column, Table
from benchmarks.script_instructions import BODY, Scripts, _library

T = TypeVar("T")

WARM = 3  # lives run before those counted

_NOTHING = "local _ = 0"  # a statement that does nothing, where a call was


@dataclass(frozen=True)
class Rewrite:
    """A regular expression of the library's text and what each match becomes."""

    pattern: str
    replacement: str

    def apply(self, code: str, variant: str) -> str:
        out, count = re.subn(self.pattern, self.replacement, code, flags=re.MULTILINE)
        if count == 0:
            raise ValueError(f"{variant}: {self.pattern!r} matches nothing in the library")
        return out


def _early(function: str, value: str = "") -> Rewrite:
    """The library's `function` returning at once (`value`: what it returns)."""
    head = rf"^(local function {function}\([^)]*\)\n)"
    return Rewrite(head, rf"\1  if true then return {value} end\n")


# The index writes of the generated place code (places.py), by the key they write.
def _index_writes(keys: str) -> Rewrite:
    return Rewrite(
        rf'(?:redis\.call|write)\("(?:ZADD|ZREM)", K\.(?:{keys})(?:, (?:n|at))?, id\)', _NOTHING
    )


VARIANTS: dict[str, tuple[str, tuple[Rewrite, ...]]] = {
    "nothing": ("the library as it is, again: what a figure moves by itself", ()),
    "events": (
        "no job event: its number, stream entry and PUBLISH (events.lua note_event)",
        (_early("note_event", "1"),),
    ),
    "series": (
        "no dashboard count (series.lua count_minute, count_started)",
        (_early("count_minute"), _early("count_started")),
    ),
    "snapshot marks": (
        "no SADD of the changed job to the snapshot's set",
        (Rewrite(r'redis\.call\("SADD", K\.dirty, id\)', _NOTHING),),
    ),
    "wake-ups": (
        "no PUBLISH to a node's or a job's waiters (wake.lua)",
        (
            Rewrite(r"^(local function wake_node\(node\)) .*$", r"\1 end"),
            Rewrite(r"^(local function wake_job\(id\)) .*$", r"\1 end"),
        ),
    ),
    "attempt entries": (
        "no entry of an attempt's end in its job's attempts (attempts.lua record_attempt)",
        (_early("record_attempt"),),
    ),
    "outbox": (
        "no SNS outbox entry of an ending (life.lua publish)",
        (_early("publish"),),
    ),
    "every index write": (
        "no move between indexes at all, holds and room included (places.py)",
        (
            Rewrite(r"^  move\(id, n, job, old, from, new, to, at\)$", _NOTHING),
            Rewrite(r"^  enter\(id, n, job, status, job\.node_id, at, write\)$", _NOTHING),
        ),
    ),
    "global indexes": (
        "no {P}:jobs and {P}:status:<status> (the listings with no namespace)",
        (_index_writes(r'all_jobs|status\("\w+"\)'),),
    ),
    "all-jobs indexes": (
        "no index of every job of a scope ({P}:jobs, ns:<ns>:jobs, node:<node>:jobs)",
        (_index_writes(r'all_jobs|namespace_jobs\(\(job\.namespace or ""\)\)|node_jobs\(\w+\)'),),
    ),
    "holds": (
        "no hold of a job's asks on its node (room.lua hold, unhold: held set, load, room)",
        (Rewrite(r"(?<!function )\b(?:un)?hold\((?:to|from|node), id, job\)", _NOTHING),),
    ),
}


def variant_library(code: str, name: str) -> str:
    for rewrite in VARIANTS[name][1]:
        code = rewrite.apply(code, name)
    return code


def measure(library: str, stored: int, lives: int) -> dict[str, float]:
    """Instructions per life of each step (STEPS) and of the life, with `library` loaded."""
    totals = life_phases(library, stored, lives, harness.callgrind_total)
    figures = {step: total / lives for step, total in totals.items()}
    figures["life"] = sum(figures[step] for step in STEPS)
    return figures


def life_phases(
    library: str, stored: int, lives: int, read: Callable[[int, str], T]
) -> dict[str, T]:
    """Each step (STEPS) of `lives` lives run as a phase in a callgrind_redis with `library`
    loaded, after `stored` jobs of another node and WARM lives: `read(pid, workdir)` of each
    phase's counters (zeroed before it)."""
    from scheduler.nodes.placement import Placement

    s = Scripts("ablation")
    elsewhere, here = Placement.among(["n1"]), Placement.among(["n0"])
    running = s.update(status="running")
    done = s.update(status="done", exit_code=0, stdout="hello")
    first = stored + WARM + 1
    numbers = range(first, first + lives)

    def report(n: int, update: Any) -> Any:
        return s.transition(f"job-{n}", update, 2.0, s.retries, "open", **s.ttl)

    phases: dict[str, Callable[[], list[Any]]] = {
        "create": lambda: [s.create_job(BODY, here, 1.0, 30) for _ in numbers],
        "poll": lambda: [s.poll("n0", 1, "open") for _ in numbers],
        "running": lambda: [report(n, running) for n in numbers],
        "done": lambda: [report(n, done) for n in numbers],
    }
    out: dict[str, T] = {}
    with tempfile.TemporaryDirectory() as workdir, harness.callgrind_redis(workdir) as (c, pid):
        c.set(s.keys.initialised, "benchmark")
        c.function_load(library, replace=True)
        _send(c, s, [s.create_job(BODY, elsewhere, 1.0, 30) for _ in range(stored)])
        for n in range(stored + 1, first):  # every key and count a life writes made once
            _send(c, s, [s.create_job(BODY, here, 1.0, 30), s.poll("n0", 1, "open")])
            _send(c, s, [report(n, running), report(n, done)])
        for step in STEPS:
            calls = phases[step]()
            harness.callgrind_zero(pid)
            _send(c, s, calls)
            out[step] = read(pid, workdir)
    return out


def _send(client: Any, s: Scripts, calls: list[Any]) -> None:
    for start in range(0, len(calls), 500):
        pipe = client.pipeline(transaction=False)
        for call in calls[start : start + 500]:
            _, keys, args = s.parts(call)
            pipe.fcall(call.script.function, len(keys), *keys, *args)
        pipe.execute()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=300, help="jobs stored before the lives")
    parser.add_argument("--lives", type=int, default=50)
    parser.add_argument("--parts", default=",".join(VARIANTS), help="the variants, by name")
    args = parser.parse_args()
    names = [name for name in args.parts.split(",") if name]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"no such part: {', '.join(unknown)} (the parts: {', '.join(VARIANTS)})")
    code = _library()
    libraries = {name: variant_library(code, name) for name in names}  # each must fit first
    base = measure(code, args.stored, args.lives)
    print(f"a life as it is: {base['life']:.0f} instructions", end="; ")
    print(", ".join(f"{step} {base[step]:.0f}" for step in STEPS))
    steps = [Column(f"{step} saved", "9.0f") for step in STEPS]
    table = Table(
        Column("life without it", "10.0f"), Column("saved", "9.0f"), Column("share", "6.1%"), *steps
    )
    table.header()
    for name in names:
        without = measure(libraries[name], args.stored, args.lives)
        saved = {step: base[step] - without[step] for step in (*STEPS, "life")}
        by_step = [saved[step] for step in STEPS]
        table.row(name, without["life"], saved["life"], saved["life"] / base["life"], *by_step)
    for name in names:
        print(f"  {name}: {VARIANTS[name][0]}")
    print(json.dumps({"life": base["life"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

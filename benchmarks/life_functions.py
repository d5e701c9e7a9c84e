"""Where a job's life goes in Redis's own functions: the life of life_ablation (create, the
poll, running, done), each phase's callgrind counters read by function, split into the
commands the scripts send, the record's JSON, Lua's garbage collector, the rest of the
scripts' Lua, and reading and answering the calls; then the functions that cost most.

    PATH=/path/to/redis/src:$PATH .venv/bin/python -m benchmarks.life_functions [--top 25]

Debian's redis-server is stripped: callgrind names no function of it (the libc's only), and
this prints the totals and says so. A redis-server built with its symbols (`make` in a
checkout of redis/redis at the tag of the one installed, 7.0.15 here) first on the PATH gives
the split (docs/PERFORMANCE.md, A cheaper life). A function's figure counts what it calls
("inclusive") for the split, only its own instructions ("self") for the ranking; the split's
parts may overlap a little (the collector also runs inside a command's answer).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

from benchmarks import harness
from benchmarks.life_ablation import life_phases
from benchmarks.life_commands import STEPS
from benchmarks.report import Column, Table
from benchmarks.script_instructions import _library

# The parts of the split, each the inclusive cost of these functions.
PARTS = {
    "a script call (FCALL)": ("fcallCommand",),
    "its commands (redis.call)": ("luaRedisGenericCommand",),
    "the record's JSON (cjson)": ("json_encode", "json_decode"),
    "Lua's garbage collector": ("luaC_step",),
}
_NAMED = re.compile(r"c?fn=\((\d+)\)(?: (.*))?")


@dataclass
class Costs:
    """A callgrind dump's instructions: each function's own, and each one's as a callee
    (what its calls cost, what they called included), by name."""

    own: Counter[str] = field(default_factory=Counter)
    called: Counter[str] = field(default_factory=Counter)

    def __iadd__(self, other: Costs) -> Costs:
        self.own.update(other.own)
        self.called.update(other.called)
        return self

    @property
    def total(self) -> int:
        return sum(self.own.values())


def read_dump(path: str) -> Costs:
    """A callgrind dump (its name compression: `fn=(id) name` once, `fn=(id)` after; a
    `calls=` line followed by the call's inclusive cost)."""
    names: dict[str, str] = {}
    costs, function, callee, in_call = Costs(), "", "", False
    with open(path) as dump:
        for line in dump:
            if line.startswith(("fn=", "cfn=")):
                match = _NAMED.match(line.strip())
                if match:
                    if match.group(2):
                        names[match.group(1)] = match.group(2)
                    name = names.get(match.group(1), match.group(1))
                    function, callee = (name, callee) if line[0] == "f" else (function, name)
            elif line.startswith("calls="):
                in_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) >= 2:
                    if in_call:
                        costs.called[callee] += int(parts[1])
                    else:
                        costs.own[function] += int(parts[1])
                    in_call = False
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=300, help="jobs stored before the lives")
    parser.add_argument("--lives", type=int, default=50)
    parser.add_argument("--top", type=int, default=25, help="how many functions to rank")
    args = parser.parse_args()
    by_step = life_phases(
        _library(),
        args.stored,
        args.lives,
        lambda pid, workdir: read_dump(harness.callgrind_dump(pid, workdir)),
    )
    life = Costs()
    for costs in by_step.values():
        life += costs
    per = float(args.lives)
    print(f"a life: {life.total / per:.0f} instructions", end="; ")
    print(", ".join(f"{step} {by_step[step].total / per:.0f}" for step in STEPS))
    missing = sorted({f for functions in PARTS.values() for f in functions} - set(life.called))
    if missing:
        print(f"this redis-server names no {', '.join(missing)}: build one with its symbols")
    else:
        _split(life, per)
    table = Table(
        Column("own instructions a life", "12.0f"), Column("share", "6.1%"), label_width=40
    )
    table.header("the functions that cost most")
    for name, own in life.own.most_common(args.top):
        table.row(name[:38], own / per, own / life.total)
    return 0


def _split(life: Costs, per: float) -> None:
    inclusive = {part: sum(life.called[f] for f in functions) for part, functions in PARTS.items()}
    call = inclusive.pop("a script call (FCALL)")
    rows = {
        **inclusive,
        "the rest of the scripts' Lua": call - sum(inclusive.values()),
        "reading and answering the calls": life.total - call,
    }
    table = Table(Column("instructions a life", "12.0f"), Column("share", "6.1%"), label_width=40)
    table.header("where a life goes")
    for part, cost in rows.items():
        table.row(part, cost / per, cost / life.total)


if __name__ == "__main__":
    sys.exit(main())

"""What barring a flood of addresses costs one API process (api/guesses.py): the Python time
of each new bar when N addresses are barred already, with the bar as it is (a heap of their
ends) and as it was before (each new bar walked every entry for ended ones), side by side in
one run; and the bar's size under a flood larger than MAX_BARRED. No Redis: the bar is the
process's own memory.

    .venv/bin/python -m benchmarks.guess_flood [--sizes 1000,10000,30000]
"""

from __future__ import annotations

import argparse
import logging

from benchmarks.report import Column, Table
from benchmarks.timing import ratio, timed
from scheduler.api import guesses
from scheduler.api.guesses import Credentials


class Walking(Credentials):
    """The bar before issue 36's review: every new bar walked the whole bar first."""

    def _bar(self, address: str, left: float, failures: int) -> None:
        now = self.clock()
        stale = [a for a, until in self.barred_until.items() if until <= now]
        for gone in stale:
            del self.barred_until[gone]
        self.barred_until[address] = now + left


def address(n: int) -> str:
    return f"2001:db8:{n >> 16 & 0xFFFF:x}:{n & 0xFFFF:x}::/64"


def per_bar_us(kind: type[Credentials], size: int) -> float:
    """µs of one new bar, averaged over the last tenth of `size` bars."""
    found = kind("k" * 43)
    tail = max(1, size // 10)
    for n in range(size - tail):
        found._bar(address(n), 300.0, 11)

    def last_tenth() -> None:
        for n in range(size - tail, size):
            found._bar(address(n), 300.0, 11)

    return timed(last_tenth)[1] / tail * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,30000")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    sizes = [int(s) for s in args.sizes.split(",")]
    limit = guesses.MAX_BARRED
    guesses.MAX_BARRED = max(sizes) + 1  # the heap itself, not its bound
    table = Table(
        Column("a new bar: heap", "8.2f", "µs"),
        Column("walking the bar", "9.2f", "µs"),
        Column("walking / heap", "6.0f"),
        label_width=26,
    )
    table.header()
    for size in sizes:
        heap, walking = per_bar_us(Credentials, size), per_bar_us(Walking, size)
        table.row(f"{size:>7} addresses barred", heap, walking, ratio(walking, heap))
    guesses.MAX_BARRED = limit
    found = Credentials("k" * 43)
    for n in range(2 * limit):
        found._bar(address(n), 300.0, 11)
    print(f"{2 * limit:>7} addresses past the limit  the bar holds {len(found.barred_until)}")


if __name__ == "__main__":
    main()

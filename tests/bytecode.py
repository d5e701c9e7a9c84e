"""The product's bytecode, written once before the suite starts its processes.

The suite starts hundreds of Python processes of the product (`scheduler serve`, `worker`,
`agent`, `up` and its children, the CLI, the benchmarks). Where PYTHONDONTWRITEBYTECODE is
set (as on this machine and in CI) none of them writes its modules' bytecode, so on a fresh
clone each compiled the whole product again: 0.4 s of CPU a process, minutes a run, until
some test that starts Python with an environment of its own happened to write them. The
installed packages' bytecode was written by pip; the product's, in the checkout (git ignores
__pycache__), is written here, as Python would without the variable.
"""

from __future__ import annotations

import compileall
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the suite's processes import from the checkout.
PACKAGES = ("scheduler", "workers", "benchmarks")


def compile_product() -> None:
    """Write (or keep, when up to date) the bytecode of every module of PACKAGES."""
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)

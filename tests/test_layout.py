"""The layout's rule, checked on the source: imports between the parts of the system point one
way (docs/ARCHITECTURE.md, "Modules"), and the agent and the client speak HTTP only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Part -> the parts of this project it may import (besides itself). A part is a sub-package
# of scheduler/ (or a top-level module of it), or workers/.
ALLOWED: dict[str, set[str]] = {
    "scheduler": set(),
    "scheduler.config": set(),
    "scheduler.models": set(),
    "scheduler.nodes": {"scheduler.models", "scheduler.config"},
    "scheduler.store": {"scheduler.models", "scheduler.config", "scheduler.nodes"},
    "scheduler.snapshot": {"scheduler.models", "scheduler.config", "scheduler.store"},
    "scheduler.api": {
        "scheduler.models",
        "scheduler.config",
        "scheduler.nodes",
        "scheduler.store",
        "scheduler.snapshot",
    },
    "workers": {
        "scheduler.models",
        "scheduler.config",
        "scheduler.nodes",
        "scheduler.store",
        "scheduler.snapshot",
    },
    # The reference agent is deployed on compute nodes: HTTP to the server, nothing else.
    "scheduler.agent": {"scheduler.models"},
    "scheduler.cli": {"*"},
    "scheduler.__main__": {"scheduler.cli"},
}
# Modules held to a narrower rule than their part's.
NARROWER: dict[str, set[str]] = {
    # The client is the `scheduler submit/status/list` command: HTTP only, like the agent.
    "scheduler.cli.client": {"scheduler.models", "scheduler.config"},
    "scheduler.cli.listing": {"scheduler.models", "scheduler.config"},
}


def part_of(module: str) -> str:
    names = module.split(".")
    return names[0] if names[0] == "workers" else ".".join(names[:2])


def modules() -> list[tuple[str, Path]]:
    found = []
    for top in ("scheduler", "workers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            names = [n for n in rel.parts if n != "__init__"]
            found.append((".".join(names), path))
    return found


def imported(path: Path) -> set[str]:
    """Every project module named by an import in the file, at any depth (lazy ones too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
    return {name for name in out if name.split(".")[0] in ("scheduler", "workers")}


@pytest.mark.parametrize("module, path", modules(), ids=[m for m, _ in modules()])
def test_imports_point_one_way(module: str, path: Path) -> None:
    own = part_of(module)
    allowed = NARROWER.get(module, ALLOWED[own])
    if "*" in allowed:
        return
    wrong = sorted(
        name
        for name in imported(path)
        if part_of(name) != own and part_of(name) not in allowed and name != "scheduler"
    )
    assert not wrong, f"{module} ({own}) may import only {sorted(allowed)}, not {wrong}"


def test_the_rule_covers_every_part() -> None:
    assert {part_of(m) for m, _ in modules()} <= set(ALLOWED)


def test_the_top_of_scheduler_stays_small() -> None:
    entries = [p.name for p in (ROOT / "scheduler").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 11, sorted(entries)

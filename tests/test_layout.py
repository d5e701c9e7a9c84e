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
    # The Python client (docs/CLIENT.md): HTTP to the server, the wire models, the settings.
    "scheduler.client": {"scheduler.models", "scheduler.config"},
    "scheduler.cli": {"*"},
    "scheduler.__main__": {"scheduler.cli"},
}
CLIENT_SIDE = {"scheduler.client", "scheduler.models", "scheduler.config"}
# Modules held to a rule of their own, mostly narrower than their part's.
NARROWER: dict[str, set[str]] = {
    # The command-line client (`scheduler submit/status/list`...) is built on the Python
    # client: HTTP only, like the agent.
    "scheduler.cli.client": CLIENT_SIDE,
    "scheduler.cli.cancel": CLIENT_SIDE,
    "scheduler.cli.batch": CLIENT_SIDE,
    "scheduler.cli.listing": CLIENT_SIDE,
    "scheduler.cli.retry": CLIENT_SIDE,
    "scheduler.cli.schedules": CLIENT_SIDE,
    "scheduler.cli.keys": CLIENT_SIDE,
    "scheduler.cli.drain": CLIENT_SIDE,
    "scheduler.cli.watch": CLIENT_SIDE,
    "scheduler.cli.job_options": {"scheduler.models", "scheduler.config"},
    # Wider: the key `scheduler up` keeps for its session is read as the agent reads its node
    # token (agent/token_file.py: a file only this user can read, never through a link).
    "scheduler.client.session": {*CLIENT_SIDE, "scheduler.agent"},
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


def imported(module: str, path: Path) -> set[str]:
    """Every project module named by an import in the file, at any depth (lazy ones too),
    relative imports resolved against `module`'s package."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = absolute(package, node.module, node.level)
            out |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    return {name for name in out if name.split(".")[0] in ("scheduler", "workers")}


def absolute(package: list[str], name: str | None, level: int) -> str:
    """The module `from {"." * level}{name} import ...` names, written in `package`."""
    if level == 0:
        return name or ""
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, name] if name else base)


@pytest.mark.parametrize("module, path", modules(), ids=[m for m, _ in modules()])
def test_imports_point_one_way(module: str, path: Path) -> None:
    own = part_of(module)
    allowed = NARROWER.get(module, ALLOWED[own])
    if "*" in allowed:
        return
    wrong = sorted(
        name
        for name in imported(module, path)
        if part_of(name) != own and part_of(name) not in allowed and name != "scheduler"
    )
    assert not wrong, f"{module} ({own}) may import only {sorted(allowed)}, not {wrong}"


def test_the_rule_covers_every_part() -> None:
    assert {part_of(m) for m, _ in modules()} <= set(ALLOWED)


def test_the_top_of_scheduler_stays_small() -> None:
    # 12: the Python client (scheduler.client, issue 42) is a part of its own.
    entries = [p.name for p in (ROOT / "scheduler").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 12, sorted(entries)


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("scheduler.agent.loop", "from ..store import jobs", "scheduler.store.jobs"),
        ("scheduler.agent.loop", "from . import remote", "scheduler.agent.remote"),
        ("scheduler.agent", "from .loop import run", "scheduler.agent.loop.run"),
        ("scheduler.agent.loop", "from ...workers import tasks", "workers.tasks"),
        ("scheduler.agent.loop", "import scheduler.store.keys", "scheduler.store.keys"),
    ],
)
def test_relative_imports_are_resolved(
    module: str, source: str, found: str, tmp_path: Path
) -> None:
    path = tmp_path / ("__init__.py" if module == "scheduler.agent" else "loop.py")
    path.write_text(source + "\n")
    assert found in imported(module, path)


def test_a_planted_relative_import_breaks_the_rule(tmp_path: Path) -> None:
    """The agent importing the store through a relative import is caught like an absolute one."""
    path = tmp_path / "loop.py"
    path.write_text("from ..store import jobs\n")
    wrong = [n for n in imported("scheduler.agent.loop", path) if part_of(n) == "scheduler.store"]
    assert wrong and "scheduler.store" not in ALLOWED["scheduler.agent"]


# Past this a module is doing more than one job (house rule: about 400 lines).
MAX_MODULE_LINES = 400


@pytest.mark.parametrize("module, path", modules(), ids=[m for m, _ in modules()])
def test_modules_stay_small(module: str, path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines: split it by job"

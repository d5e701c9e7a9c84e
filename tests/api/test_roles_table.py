"""docs/SECURITY.md's table of roles x routes is the route table's (scheduler/api/roles_table.py),
and every call of the table is in it, or is a node's, anyone's or the web UI's."""

from __future__ import annotations

from pathlib import Path

from scheduler.api import roles_table
from scheduler.api.routes import TABLE
from scheduler.api.routing import UI_PREFIX, Access

SECURITY = Path(__file__).resolve().parents[2] / "docs" / "SECURITY.md"


def test_the_documented_table_is_the_route_tables() -> None:
    rendered = roles_table.render(TABLE)
    assert rendered in SECURITY.read_text(encoding="utf-8"), (
        "docs/SECURITY.md's table of roles x routes is not the route table's: paste in the "
        "output of `python -m scheduler.api.roles_table`"
    )


def test_every_other_call_is_a_nodes_anyones_or_the_uis() -> None:
    """What the table leaves out: the web UI's pages, /health, and the agent calls, which a
    named key does not make (403 in token mode: test_role_attacks.py)."""
    listed = {(name, path) for name, path, _ in roles_table.keys_calls(TABLE)}
    for entry in TABLE.entries:
        for name, method in entry.methods.items():
            if (name, entry.path) in listed:
                continue
            ui = entry.path == UI_PREFIX or entry.path.startswith(UI_PREFIX + "/")
            nodes = method.access is Access.AGENT and method.anyone_in_open_mode
            assert ui or nodes or method.access is Access.ANYONE, (name, entry.path)

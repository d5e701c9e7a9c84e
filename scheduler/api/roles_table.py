"""The table of roles x routes in docs/SECURITY.md (Named keys), rendered from the route table
(routes.TABLE): each call a named key may make, and the least role it needs (Method.role).
tests/api/test_roles_table.py checks that the document holds this very table, so it cannot
drift from the code; after a change, print it and paste it there:

    python -m scheduler.api.roles_table
"""

from __future__ import annotations

from collections.abc import Iterator

from scheduler.api.routing import UI_PREFIX, Access, Method, RouteTable

# What a named key's call is, by its access: KEY; POLL and OWN_SERVICES are the key's but for
# an agent's own call (a node's token makes those); an AGENT call refused in open mode to
# anyone but the operator or the node's own token is the operator's (agents.AgentAuth:
# `operator_or_node`). The other AGENT calls are a node's (a named key: 403, AGENT_AUTH=token).
_KEYS = (Access.KEY, Access.POLL, Access.OWN_SERVICES)
_NOTES = {
    Access.POLL: " (a listing; the agent's poll is a node's)",
    Access.OWN_SERVICES: " (without `node_id`; with it, an agent's own list)",
}
HEADER = "| route | method | least role |\n|---|---|---|\n"


def is_keys(method: Method) -> bool:
    """Whether a named key makes this call (by its role), rather than a node or a browser."""
    return method.access in _KEYS or method.operators


def keys_calls(table: RouteTable) -> Iterator[tuple[str, str, Method]]:
    """(method, path template, its Method) of each call a named key makes, in the table's
    order; not the web UI's pages (a session's role decides those, as its key's)."""
    for entry in table.entries:
        if entry.path == UI_PREFIX or entry.path.startswith(UI_PREFIX + "/"):
            continue
        for name, method in entry.methods.items():
            if is_keys(method):
                yield name, entry.path, method


def render(table: RouteTable) -> str:
    """The Markdown table: one row a call, the least role that makes it (each role makes
    what the roles below it make: models/access_key.py)."""
    rows = [
        f"| `{path}`{_NOTES.get(method.access, '')} | {name} | {method.role.value} |\n"
        for name, path, method in keys_calls(table)
    ]
    return HEADER + "".join(rows)


if __name__ == "__main__":
    from scheduler.api.routes import TABLE

    print(render(TABLE), end="")

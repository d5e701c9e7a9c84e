"""The operations on named keys (docs/SECURITY.md, Named keys): make one with a role, list
them, revoke one; each a plan (steps.py), an admin's call. ops.py lists them all."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.client import calls
from scheduler.client.steps import Flow
from scheduler.models.access_key import AUDIT_PAGE, AuditEntry, KeyMade, KeyView, Role

_made = calls.decoded(KeyMade)
_audit = calls.decoded(list[AuditEntry])


_keys = calls.decoded(list[KeyView])


_JSON = {"Content-Type": "application/json"}


def add_key(name: str, /, role: Role | str, namespaces: Sequence[str] = ()) -> Flow[KeyMade]:
    """A named key with `role` (a `Role`, or its name: reader, submitter, operator, admin),
    limited to `namespaces` (none: every namespace); its `.key` is in this answer only (the
    scheduler keeps its hash). Conflict when the name is taken. Not sent again once sent:
    after a lost answer the key may have been made, and its secret is lost with the answer
    (look with `named_keys()`, revoke it, add it again)."""
    body: dict[str, object] = {"name": name, "role": role.value if isinstance(role, Role) else role}
    if namespaces:
        body["namespaces"] = list(namespaces)
    return (
        yield from calls.call(_made, "POST", "/keys", False, json=calls.encode(body), headers=_JSON)
    )


def named_keys() -> Flow[list[KeyView]]:
    """Every named key, by name: its role, when and by whom it was made, never the key."""
    return (yield from calls.call(_keys, "GET", "/keys", True))


def revoke_key(name: str, /) -> Flow[None]:
    """The key stops working (NotFound when no key has that name). Not sent again once
    sent."""
    return (yield from calls.call(calls.no_content, "DELETE", calls.path("keys", name), False))


def audit(limit: int = AUDIT_PAGE) -> Flow[list[AuditEntry]]:
    """The newest admin calls, newest first (at most `limit`): who made or revoked which key,
    and when."""
    return (yield from calls.call(_audit, "GET", "/audit", True, params={"limit": str(limit)}))

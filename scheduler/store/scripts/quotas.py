"""The scripts of quotas (docs/GUIDE.md, Quotas), each with its call: set or change a
namespace's quota (SET_QUOTA) and list the namespaces with their quotas and what they hold
(NAMESPACES). The enforcement is in the scripts a job's life goes through
(lua/includes/quota.lua, admit.lua).
"""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.models.access_key import Principal
from scheduler.models.namespace import shown
from scheduler.models.quota import Change, NamespaceView, Quota, Use
from scheduler.store.errors import StoreNotReady
from scheduler.store.scripts import codes
from scheduler.store.scripts.access import AUDIT_MAX
from scheduler.store.scripts.script import Call, Script

_quota = msgspec.json.Decoder(Quota)


def _set(reply: Any) -> Quota:
    if int(reply[0]) == codes.NOT_READY:
        raise StoreNotReady()
    return _quota.decode(reply[1]) if reply[1] else Quota()


SET_QUOTA = Script("SET_QUOTA", "namespace quota merge shown detail at by audit_max", _set)
_encode = msgspec.json.Encoder().encode


def _namespaces(reply: Any) -> list[NamespaceView]:
    views = []
    for i in range(0, len(reply), 7):
        name, quota, running, pending, cpus, memory_mb, waiting = reply[i : i + 7]
        use = Use(
            running=int(running),
            pending=int(pending),
            cpus=int(cpus),
            memory_mb=int(memory_mb),
            over_quota=int(waiting),
        )
        limits = _quota.decode(quota) if quota else Quota()
        views.append(NamespaceView(name=shown(name.decode()), quota=limits, use=use))
    return sorted(views, key=lambda view: view.name)


NAMESPACES = Script("NAMESPACES", "", _namespaces, read_only=True)


def set_quota(namespace: str, quota: Quota, at: float, by: Principal) -> Call[Quota]:
    """Namespace `namespace` (stored name: "" the default's) limited by `quota` (empty: none);
    answers the quota stored. StoreNotReady while Redis lost its data and the snapshot is not
    back yet."""
    return _call(namespace, _encode(quota) if quota else "", False, quota.said(), at, by)


def change_quota(namespace: str, change: Change, at: float, by: Principal) -> Call[Quota]:
    """Namespace `namespace`'s quota with the limits `change` gives (0: that one goes), the
    others as stored, in one step; answers the quota stored, as set_quota."""
    return _call(namespace, _encode(change.given()), True, change.said(), at, by)


def _call(
    namespace: str, quota: bytes | str, merge: bool, detail: str, at: float, by: Principal
) -> Call[Quota]:
    return SET_QUOTA.call(
        namespace=namespace,
        quota=quota,
        merge="1" if merge else "0",
        shown=shown(namespace),
        detail=detail,
        at=at,
        by=by.name,
        audit_max=AUDIT_MAX,
    )


def namespaces() -> Call[list[NamespaceView]]:
    return NAMESPACES.call()

"""The operations on namespaces' quotas (docs/GUIDE.md, Quotas): set one or change some of its
limits (an admin's calls),
list the namespaces with their quotas and use; each a plan (steps.py). ops.py lists them all."""

from __future__ import annotations

from scheduler.client import calls
from scheduler.client.steps import Flow
from scheduler.models.quota import NamespaceView, Quota, QuotaChange

_quota = calls.decoded(Quota)
_namespaces = calls.decoded(list[NamespaceView])
_JSON = {"Content-Type": "application/json"}


def set_quota(
    namespace: str, /, running: int = 0, pending: int = 0, cpus: int = 0, memory_mb: int = 0
) -> Flow[Quota]:
    """Namespace `namespace`'s quota (`default` names the default's): at most `running` jobs
    running, `pending` pending (a submit past it is refused: TooManyRequests), `cpus` and
    `memory_mb` asked by its running jobs; 0 is no limit, all 0 no quota. Answers the quota
    set. Safe to send again (it sets, whatever was there)."""
    quota = Quota(running=running, pending=pending, cpus=cpus, memory_mb=memory_mb)
    path = calls.path("namespaces", namespace, "quota")
    return (
        yield from calls.call(_quota, "PUT", path, True, json=calls.encode(quota), headers=_JSON)
    )


def change_quota(
    namespace: str,
    /,
    running: int | None = None,
    pending: int | None = None,
    cpus: int | None = None,
    memory_mb: int | None = None,
) -> Flow[Quota]:
    """Namespace `namespace`'s quota with the limits given changed (0: that limit goes) and
    the others kept, in one step on the server (two admins changing two limits at once both
    keep theirs). Answers the quota as it is now."""
    limits = {"running": running, "pending": pending, "cpus": cpus, "memory_mb": memory_mb}
    change = QuotaChange(**{name: value for name, value in limits.items() if value is not None})
    path = calls.path("namespaces", namespace, "quota")
    return (
        yield from calls.call(_quota, "PATCH", path, True, json=calls.encode(change), headers=_JSON)
    )


def namespaces() -> Flow[list[NamespaceView]]:
    """The default namespace and each with a quota or jobs (those of the key, for a key limited
    to some), by name: its `quota` and its `use` now (running, pending, cpus, memory_mb, and
    how many wait for quota: over_quota)."""
    return (yield from calls.call(_namespaces, "GET", "/namespaces", True))

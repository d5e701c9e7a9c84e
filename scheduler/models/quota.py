"""A namespace's quota (docs/GUIDE.md, Quotas): what its jobs may hold at once. An admin sets
it (PUT /namespaces/{ns}/quota, or PATCH to change some limits); the scripts enforce it
(store/scripts/lua/includes/quota.lua, admit.lua). Pure: no I/O here.

- `running`: its jobs running or cancelling;
- `pending`: its jobs pending, delayed or waiting (a submit past it is refused, 429);
- `cpus`, `memory_mb`: what its running (and cancelling) jobs ask, summed.

0 is no limit; all four 0 is no quota (the namespace is not stored then).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

# A limit's bound: exact as a double in Lua, far past any fleet.
LIMIT_MAX = 2**40
Limit = Annotated[int, msgspec.Meta(ge=0, le=LIMIT_MAX)]


class Quota(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, kw_only=True):
    """A namespace's limits (the body of PUT /namespaces/{ns}/quota); 0 or absent: none. Stored
    as this JSON (omitted limits absent), which the scripts read."""

    running: Limit = 0
    pending: Limit = 0
    cpus: Limit = 0
    memory_mb: Limit = 0

    def __bool__(self) -> bool:
        return any(msgspec.structs.astuple(self))

    def said(self) -> str:
        """The limits as the audit and the CLI say them: `running=4 cpus=16`, or `none`."""
        limits = msgspec.structs.asdict(self).items()
        return _said({name: value for name, value in limits if value}) or "none"


class Change(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, kw_only=True):
    """The body of PATCH /namespaces/{ns}/quota (QuotaChange, below: Quota's limits, each
    optional): the limits given change (0, or null as in a JSON merge patch: that one goes),
    those left out stay as they are. The merge is one script, so two admins changing two
    limits at once both keep theirs."""

    def given(self) -> dict[str, int]:
        """The limits given, a null one as 0."""
        limits = msgspec.structs.asdict(self).items()
        return {k: v or 0 for k, v in limits if v is not msgspec.UNSET}

    def said(self) -> str:
        """The change as the audit says it: `cpus=16 running=0 (others kept)`."""
        return f"{_said(self.given()) or 'nothing'} (others kept)"


def _said(limits: dict[str, int]) -> str:
    return " ".join(f"{name}={value}" for name, value in limits.items())


# Quota's limits, each absent (UNSET) unless given: declared from Quota's, so a new limit is
# one field there.
QuotaChange: type[Change] = msgspec.defstruct(  # type: ignore[assignment]
    "QuotaChange",
    [(name, Limit | None | msgspec.UnsetType, msgspec.UNSET) for name in Quota.__struct_fields__],
    bases=(Change,),
    module=__name__,
)


class Use(msgspec.Struct, kw_only=True):
    """What a namespace holds now: its jobs running (or cancelling), pending (pending, delayed
    or waiting; those waiting for quota among them: `over_quota`), and the cpus and memory_mb
    its running jobs ask."""

    running: int = 0
    pending: int = 0
    cpus: int = 0
    memory_mb: int = 0
    over_quota: int = 0


class NamespaceView(msgspec.Struct, kw_only=True):
    """A namespace as GET /namespaces lists it: its name (`default` for the default's), its
    quota (no member: none) and what it holds now."""

    name: str
    quota: Quota
    use: Use

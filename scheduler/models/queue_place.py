"""A pending job's place in the queue it waits in: GET /jobs/{id}/place, the web UI's job
page and `scheduler status` (the agents' GET /jobs/{id} never says it: its record alone)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from scheduler.models.job import QUOTA_REASONS


class QueuePlace(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """`ahead`: the jobs before it in the queue it waits in (its node's, the jobs waiting
    for a node, or its namespace's waiting for quota), of `queued` in all. Both absent (an
    empty object) when it waits in none: not pending."""

    ahead: int | None = None
    queued: int | None = None


NOWHERE = QueuePlace()


def in_words(
    place: QueuePlace, node_id: str, pending_reason: str | None, node: Callable[[str], str] = str
) -> str:
    """The place in words ("" in no queue): "2 ahead of it in the queue of vm (3 queued)".
    Ahead is the queue's order (priority, then submission): a job behind may still start
    first where it fits and they do not, or when an idle node takes it (work stealing).
    `node` writes the node's name (the UI's a link)."""
    if place.ahead is None or place.queued is None:
        return ""
    if node_id:
        where = f"the queue of {node(node_id)}"
    elif pending_reason in QUOTA_REASONS:
        where = "its namespace's jobs waiting for quota"
    else:
        where = "the jobs waiting for a node"
    ahead = "first" if place.ahead == 0 else f"{place.ahead:,} ahead of it"
    return f"{ahead} in {where} ({place.queued:,} queued)"

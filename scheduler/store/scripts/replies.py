"""How the scripts' replies are read where several scripts share a shape: ids, job records,
and the jobs a script moved between nodes or handled as a lost node's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def ids(raw: list[bytes]) -> list[str]:
    return [str(job_id, "utf-8") for job_id in raw]


def pairs(flat: list[Any]) -> dict[str, Any]:
    """A hash as HGETALL (or a script) answers it, flat: field (as text) -> value."""
    return {str(flat[i], "utf-8"): flat[i + 1] for i in range(0, len(flat), 2)}


def blobs(reply: list[bytes | None]) -> list[bytes]:
    """The records of a reply, those that were missing left out."""
    return [blob for blob in reply if blob is not None]


def groups(reply: list[bytes], size: int) -> list[list[str]]:
    """A flat script reply of records of `size` fields, as text, one list per record."""
    text = [str(part, "utf-8") for part in reply]
    return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass(frozen=True, slots=True)
class Requeued:
    """A pending job moved off a lost or leaving node."""

    job_id: str
    from_node: str
    to_node: str


def requeued(reply: list[bytes]) -> list[Requeued]:
    return [Requeued(*fields) for fields in groups(reply, 3)]


@dataclass(frozen=True, slots=True)
class Lost:
    """A running job of a lost node (or of an id passed to a new holder), after the node-loss
    rule (node_loss.lua, lose_running): `status` is `pending` (retried or a service placed again, on
    `to_node`), `delayed` (retried after its backoff) or `failed` (no retry left)."""

    job_id: str
    from_node: str
    to_node: str
    status: str


def lost_jobs(reply: list[bytes]) -> list[Lost]:
    return [Lost(*fields) for fields in groups(reply, 4)]

"""The operations on nodes (list, drain, undrain) and schedules, each a plan (steps.py);
ops.py lists them all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.client import calls
from scheduler.client.models import Schedule
from scheduler.client.steps import Feed, Flow, Item
from scheduler.models.registry import Node, NodeDrained, NodeUndrained

_nodes = calls.decoded(dict[str, Node])


def nodes(*, role: str = "") -> Flow[dict[str, Node]]:
    """The nodes by id (or those of this role: compute, storage)."""
    return (yield from calls.call(_nodes, "GET", "/nodes", True, params=calls.given(role=role)))


_drained = calls.decoded(NodeDrained)


_undrained = calls.decoded(NodeUndrained)


_DRAIN_HEADERS = {"Content-Type": "application/json"}


def drain(node_id: str, /) -> Flow[NodeDrained]:
    """No new job goes to the node; its queued jobs move to other nodes (`moved`), or wait
    for one that fits (`unplaced`). Draining twice is draining once."""
    path = calls.path("nodes", node_id, "drain")
    return (yield from calls.call(_drained, "POST", path, True, headers=_DRAIN_HEADERS))


def undrain(node_id: str, /) -> Flow[NodeUndrained]:
    """The node takes new jobs again (`undrained`: whether it was drained)."""
    path = calls.path("nodes", node_id, "undrain")
    return (yield from calls.call(_undrained, "POST", path, True, headers=_DRAIN_HEADERS))


_schedule = calls.decoded(Schedule)


_schedules = calls.decoded(list[Schedule])


def add_schedule(
    name: str,
    /,
    job: Mapping[str, Any],
    *,
    cron: str = "",
    every_secs: int = 0,
    timezone: str = "",
    catchup: str = "",
    paused: bool = False,
) -> Flow[Schedule]:
    """A named schedule making `job` (a POST /jobs body) by `cron` (5 fields, in
    `timezone`) or `every_secs`; Conflict when the name is taken. Not sent again once sent."""
    body = {"name": name, "job": dict(job), "cron": cron, "every_secs": every_secs}
    body |= calls.given(timezone=timezone, catchup=catchup)
    body = {k: v for k, v in body.items() if v} | ({"paused": True} if paused else {})
    return (yield from calls.call(_schedule, "POST", "/schedules", False, json=calls.encode(body)))


def schedules(*, page_size: int = calls.PAGE) -> Feed[Schedule]:
    """Every schedule, by name, read a page at a time as the iteration goes."""
    after = ""
    while True:
        params = {"limit": str(page_size), **calls.given(after=after)}
        page = yield from calls.call(_schedules, "GET", "/schedules", True, params=params)
        for found in page:
            yield Item(found)
        if len(page) < page_size:
            return
        after = page[-1].name


def schedule(name: str, /) -> Flow[Schedule]:
    """The schedule (NotFound when there is none)."""
    return (yield from calls.call(_schedule, "GET", calls.path("schedules", name), True))


def pause_schedule(name: str, /) -> Flow[Schedule]:
    """No tick of it fires until resumed."""
    return (yield from calls.call(_schedule, "POST", calls.path("schedules", name, "pause"), True))


def resume_schedule(name: str, /) -> Flow[Schedule]:
    """Active again, from now."""
    return (yield from calls.call(_schedule, "POST", calls.path("schedules", name, "resume"), True))


def delete_schedule(name: str, /) -> Flow[None]:
    """Delete it (its jobs stay). Not sent again once sent."""
    return (yield from calls.call(calls.no_content, "DELETE", calls.path("schedules", name), False))

"""The fit rules of placement (nodes/placement.py, models/labels.py), as tables: which node
offers enough and has room, which is least loaded, and why a job waits. The scripts' Lua is
held to the same rules against a real Redis (tests/store/test_placement_store.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scheduler.models.job import PENDING_REASONS, Job, validate_create
from scheduler.models.labels import check_labels, matches, node_labels
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import (
    Ask,
    NodeRoom,
    NoHealthyNodes,
    find_node,
    fits,
    offers,
    rotate,
    spread,
    within,
)


@pytest.mark.parametrize(
    "ask, held, offered, expected",
    [
        (0, 0, 0, True),
        (4, 0, 0, True),  # nothing offered: not checked (the Rust agent sends no memory)
        (4, 100, 0, True),
        (4, 0, 4, True),
        (4, 1, 4, False),
        (3, 1, 4, True),
        (5, 0, 4, False),
        (0, 4, 4, True),  # asking nothing always fits
        (0, 9, 4, True),  # even on a node that holds more than it now offers
    ],
)
def test_within(ask: int, held: int, offered: int, expected: bool) -> None:
    assert within(ask, held, offered) is expected


BIG = NodeRoom("big", labels={"zone": "a", "gpu": "yes"}, cpus=8, memory_mb=16000)


@pytest.mark.parametrize(
    "node, ask, offered, room",
    [
        (BIG, Ask(), True, True),
        (BIG, Ask(cpus=8, memory_mb=16000), True, True),
        (BIG, Ask(cpus=9), False, False),
        (BIG, Ask(memory_mb=16001), False, False),
        (NodeRoom("held", cpus=8, held_cpus=6), Ask(cpus=2), True, True),
        (NodeRoom("held", cpus=8, held_cpus=6), Ask(cpus=3), True, False),
        (NodeRoom("mem", memory_mb=1000, held_memory_mb=900), Ask(memory_mb=200), True, False),
        (NodeRoom("unknown"), Ask(cpus=64, memory_mb=10**6), True, True),
        (BIG, Ask(node_selector={"zone": "a"}), True, True),
        (BIG, Ask(node_selector={"zone": "b"}), False, True),
        (BIG, Ask(node_selector={"zone": ["b", "a"]}), True, True),
        (BIG, Ask(node_selector={"zone": "a", "gpu": "no"}), False, True),
        (BIG, Ask(node_selector={"rack": "1"}), False, True),
    ],
)
def test_offers_and_fits(node: NodeRoom, ask: Ask, offered: bool, room: bool) -> None:
    assert offers(node, ask) is offered
    assert fits(node, ask) is room


@pytest.mark.parametrize(
    "selector, labels, expected",
    [
        ({}, {}, True),
        ({}, {"a": "1"}, True),
        ({"a": "1"}, {"a": "1", "b": "2"}, True),
        ({"a": "1"}, {"a": "2"}, False),
        ({"a": "1"}, {}, False),
        ({"a": ["2", "1"]}, {"a": "1"}, True),
        ({"a": ["2", "3"]}, {"a": "1"}, False),
        ({"a": "1", "b": "2"}, {"a": "1"}, False),
        ({"a": ""}, {"a": ""}, True),
        ({"node.id": "n1"}, node_labels("n1", "host-1", {}, vouched=True), True),
        ({"node.hostname": "host-1"}, node_labels("n1", "host-1", {}, vouched=True), True),
        # A hostname the operator did not vouch for is no label: anyone can say it.
        ({"node.hostname": "host-1"}, node_labels("n1", "host-1", {}, vouched=False), False),
        ({"node.id": "n1"}, node_labels("n1", "host-1", {}, vouched=False), True),
        ({"node.id": "n2"}, node_labels("n1", "host-1", {}, vouched=True), False),
    ],
)
def test_matches(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert matches(selector, labels) is expected


def test_a_node_cannot_register_the_schedulers_labels_as_its_own() -> None:
    assert node_labels("n1", "h", {"node.id": "n9"}, vouched=True)["node.id"] == "n1"
    with pytest.raises(InvalidInput, match=r"node\.id"):
        check_labels({"node.id": "n9"})


@pytest.mark.parametrize(
    "loads, ticket, expected",
    [
        ({"a": 0}, 1, "a"),
        ({"a": 0, "b": 0, "c": 0}, 1, "a"),
        ({"a": 0, "b": 0, "c": 0}, 2, "b"),
        ({"a": 0, "b": 0, "c": 0}, 4, "a"),
        ({"a": 5, "b": 0, "c": 0}, 1, "b"),  # the busy node gets nothing until the others
        ({"a": 5, "b": 0, "c": 0}, 2, "c"),
        ({"a": 5, "b": 1, "c": 0}, 7, "c"),
        ({"n10": 0, "n9": 0}, 1, "n10"),  # ties in id order, as the scripts sort
    ],
)
def test_spread(loads: dict[str, int], ticket: int, expected: str) -> None:
    assert spread(loads, ticket) == expected


@pytest.mark.parametrize(
    "group, ticket, fitting, expected",
    [
        (["a", "b", "c"], 1, {"a", "b", "c"}, "a"),
        (["a", "b", "c"], 2, {"a", "b", "c"}, "b"),
        (["a", "b", "c"], 1, {"b", "c"}, "b"),  # a has no room: the next from a's place
        (["a", "b", "c"], 3, {"a", "b"}, "a"),  # from c's place, round to a
        (["a", "b", "c"], 2, set(), None),
    ],
)
def test_rotate(group: list[str], ticket: int, fitting: set[str], expected: str | None) -> None:
    assert rotate(group, ticket, fitting) == expected


def test_spread_without_nodes() -> None:
    with pytest.raises(NoHealthyNodes):
        spread({}, 1)


def room(node_id: str, **fields: Any) -> NodeRoom:
    return NodeRoom(
        node_id,
        labels=node_labels(node_id, node_id, fields.pop("labels", {}), vouched=True),
        **fields,
    )


@pytest.mark.parametrize(
    "ask, nodes, expected",
    [
        (Ask(), [], (None, "no_nodes")),
        (Ask(), [room("a", live=False)], (None, "no_nodes")),
        (Ask(cpus=1), [room("a", live=False)], (None, "no_nodes")),
        (Ask(), [room("a")], ("a", "")),
        (Ask(), [room("a", drained=True)], (None, "drained")),
        (Ask(), [room("a", drained=True), room("b")], ("b", "")),
        (Ask(cpus=4), [room("a", cpus=2)], (None, "no_fit")),
        (Ask(cpus=4), [room("a", cpus=2), room("b", cpus=4, held_cpus=1)], (None, "full")),
        (Ask(cpus=4), [room("a", cpus=2), room("b", cpus=4, drained=True)], (None, "drained")),
        (
            Ask(cpus=4),
            [room("a", cpus=4, held_cpus=4, drained=True), room("b", cpus=4, held_cpus=1)],
            (None, "full"),
        ),
        (Ask(node_selector={"node.id": "b"}), [room("a"), room("b", held_jobs=9)], ("b", "")),
        (Ask(node_selector={"node.id": "c"}), [room("a"), room("b")], (None, "no_fit")),
        (Ask(node_selector={"node.id": "b"}), [room("a"), room("b", live=False)], (None, "no_fit")),
        (Ask(node_selector={"zone": ["x", "y"]}), [room("a", labels={"zone": "y"})], ("a", "")),
        (Ask(memory_mb=512), [room("a", memory_mb=256), room("b")], ("b", "")),  # b: unknown
        (Ask(cpus=1), [room("a", cpus=2, held_jobs=3), room("b", cpus=2, held_jobs=1)], ("b", "")),
        # Ties rotate from the ticket's place over every open node holding as many.
        (Ask(cpus=4), [room("a", cpus=2), room("b", cpus=8), room("c", cpus=8)], ("b", "")),
        (
            Ask(cpus=4),
            [room("a", cpus=8, held_jobs=1), room("b", cpus=2), room("c", cpus=8, held_jobs=1)],
            ("a", ""),
        ),
    ],
)
def test_find_node(ask: Ask, nodes: list[NodeRoom], expected: tuple[str | None, str]) -> None:
    assert find_node(ask, nodes, 1) == expected
    if expected[1]:
        assert expected[1] in PENDING_REASONS


def job(**fields: Any) -> Job:
    return Job(
        job_id="", node_id="", command="x", status="pending", retry_count=0, created_at="", **fields
    )


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"cpus": -1}, "invalid cpus -1"),
        ({"cpus": 65537}, "invalid cpus 65537"),
        ({"memory_mb": -5}, "invalid memory_mb -5"),
        ({"memory_mb": 2**24 + 1}, "invalid memory_mb"),
        ({"node_selector": {"a b": "1"}}, "invalid node_selector key 'a b'"),
        ({"node_selector": {"a": "x y"}}, "invalid node_selector value 'x y'"),
        ({"node_selector": {"a": []}}, "invalid node_selector: 'a' needs 1 to 16 values"),
        ({"node_selector": {"a": [str(i) for i in range(17)]}}, "needs 1 to 16 values"),
        ({"node_selector": {f"k{i}": "v" for i in range(17)}}, "at most 16 keys"),
        ({"node_selector": {"k" * 64: "v"}}, "invalid node_selector key"),
        ({"node_selector": {"k": "v" * 256}}, "invalid node_selector value"),
        ({"instance_id": "i-1", "cpus": 1}, "invalid node_selector: an instance's job"),
    ],
)
def test_asks_are_validated_naming_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)):
        validate_create(job(**fields))


def test_valid_asks() -> None:
    validate_create(
        job(cpus=65536, memory_mb=2**24, node_selector={"node.id": "n1", "zone": ["a", "b/c"]})
    )

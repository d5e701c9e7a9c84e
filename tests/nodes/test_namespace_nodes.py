"""Nodes for some namespaces (docs/GUIDE.md; models/labels.py serves, nodes/placement.py
find_node), as tables: which node serves which namespace, which label values are refused,
where a job goes and why it waits. The scripts' Lua is held to the same rules against a real
Redis (tests/store/test_namespace_placement.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scheduler.models.job import PENDING_REASONS
from scheduler.models.labels import check_labels, node_labels, parse_labels, served, serves
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import Ask, NodeRoom, find_node

TEAM_A = {"namespace": "team-a"}
A_AND_B = {"namespace": "team-a.team-b"}
A_AND_DEFAULT = {"namespace": "team-a.default"}


@pytest.mark.parametrize(
    "labels, namespace, expected",
    [
        ({}, "", True),  # no label: every namespace, the default's too
        ({}, "team-a", True),
        ({"zone": "x"}, "team-b", True),
        (TEAM_A, "team-a", True),
        (TEAM_A, "", False),  # "" is the default namespace as stored
        (TEAM_A, "team-b", False),
        (TEAM_A, "team", False),  # a name is matched whole, not as a prefix
        (TEAM_A, "a", False),
        (A_AND_B, "team-a", True),
        (A_AND_B, "team-b", True),
        (A_AND_B, "", False),
        (A_AND_B, "team-c", False),
        (A_AND_DEFAULT, "", True),
        (A_AND_DEFAULT, "team-a", True),
        (A_AND_DEFAULT, "team-b", False),
        ({"namespace": "default"}, "", True),
        ({"namespace": "default"}, "team-a", False),
        # The node's other labels, its id's among them, change nothing.
        (node_labels("n1", "h", TEAM_A, vouched=True), "team-a", True),
        (node_labels("n1", "h", TEAM_A, vouched=True), "", False),
    ],
)
def test_serves(labels: dict[str, str], namespace: str, expected: bool) -> None:
    assert serves(labels, namespace) is expected


@pytest.mark.parametrize(
    "labels, expected",
    [
        ({}, None),
        ({"zone": "x"}, None),
        (TEAM_A, frozenset({"team-a"})),
        (A_AND_DEFAULT, frozenset({"team-a", "default"})),
    ],
)
def test_served(labels: dict[str, str], expected: frozenset[str] | None) -> None:
    assert served(labels) == expected


@pytest.mark.parametrize(
    "value",
    ["team-a", "default", "a", "team-a.team-b", "team-a.default", "x1.x2.x3", "a" * 63],
)
def test_a_namespace_label_naming_namespaces_is_valid(value: str) -> None:
    check_labels({"namespace": value})


@pytest.mark.parametrize(
    "value",
    [
        "",  # a node for no namespace would never run anything
        "Team-A",
        "team_a",
        "team/a",
        "-team",
        "team-",
        "team-a.",
        ".team-a",
        "team-a..team-b",
        "team-a.team-a",  # each once
        "a" * 64,
    ],
)
def test_a_namespace_label_not_naming_namespaces_is_refused(value: str) -> None:
    message = f"invalid labels value {value[:64]!r} for namespace"
    with pytest.raises(InvalidInput, match=re.escape(message)):
        check_labels({"namespace": value})


def test_agent_labels_say_the_namespaces_too() -> None:
    assert parse_labels("namespace=team-a.team-b, zone=x") == {
        "namespace": "team-a.team-b",
        "zone": "x",
    }
    with pytest.raises(InvalidInput, match="for namespace"):
        parse_labels("namespace=Team-A")


def room(node_id: str, **fields: Any) -> NodeRoom:
    return NodeRoom(
        node_id,
        labels=node_labels(node_id, node_id, fields.pop("labels", {}), vouched=True),
        **fields,
    )


A = room("a", labels=TEAM_A)
SHARED = room("s")
B = room("b", labels={"namespace": "team-b"})


@pytest.mark.parametrize(
    "ask, nodes, expected",
    [
        # A default job never goes to a node labelled for other namespaces.
        (Ask(), [A, B], (None, "namespace")),
        (Ask(), [A, SHARED, B], ("s", "")),
        (Ask(), [room("d", labels={"namespace": "default"})], ("d", "")),
        # A team-a job: its own node, or one serving every namespace.
        (Ask(namespace="team-a"), [A, B], ("a", "")),
        (Ask(namespace="team-a"), [B, SHARED], ("s", "")),
        (Ask(namespace="team-a"), [B], (None, "namespace")),
        (Ask(namespace="team-a"), [room("ab", labels=A_AND_B)], ("ab", "")),
        # The least loaded node that serves it, not the least loaded of all.
        (Ask(namespace="team-a"), [room("a", labels=TEAM_A, held_jobs=5), B], ("a", "")),
        (Ask(namespace="team-a"), [room("a", labels=TEAM_A, held_jobs=5), SHARED], ("s", "")),
        # Its node lost (not live): nothing else serves it.
        (Ask(namespace="team-a"), [room("a", labels=TEAM_A, live=False), B], (None, "namespace")),
        (Ask(namespace="team-a"), [room("a", labels=TEAM_A, live=False)], (None, "no_nodes")),
        # Among the nodes that serve it, the usual reasons.
        (Ask(namespace="team-a", cpus=4), [room("a", labels=TEAM_A, cpus=2), B], (None, "no_fit")),
        (
            Ask(namespace="team-a", cpus=4),
            [room("a", labels=TEAM_A, cpus=2), room("b", labels={"namespace": "team-b"}, cpus=8)],
            (None, "no_fit"),  # b offers enough, but is not team-a's
        ),
        (
            Ask(namespace="team-a", cpus=4),
            [room("a", labels=TEAM_A, cpus=4, held_cpus=1), B],
            (None, "full"),
        ),
        (Ask(namespace="team-a"), [room("a", labels=TEAM_A, drained=True), B], (None, "drained")),
        (
            Ask(namespace="team-a", node_selector={"node.id": "b"}),
            [A, B],
            (None, "no_fit"),  # naming another namespace's node does not get past the rule
        ),
        (Ask(namespace="team-b", node_selector={"node.id": "b"}), [A, B], ("b", "")),
    ],
)
def test_find_node_keeps_namespaces(
    ask: Ask, nodes: list[NodeRoom], expected: tuple[str | None, str]
) -> None:
    assert find_node(ask, nodes, 1) == expected
    if expected[1]:
        assert expected[1] in PENDING_REASONS


@pytest.mark.parametrize("ticket", range(1, 7))
def test_a_node_of_another_namespace_is_passed_over_as_one_without_room(ticket: int) -> None:
    """The rotation's ring holds every open node of the least load, as the scripts' walk of
    their load index does; a node of another namespace is only never chosen."""
    nodes = [B, room("c"), room("d")]
    chosen, _ = find_node(Ask(), nodes, ticket)
    assert chosen == ["c", "c", "d"][(ticket - 1) % 3]

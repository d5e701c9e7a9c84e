"""Node labels and a job's node selector (docs/GUIDE.md, Placement): their syntax and bounds, and
the labels every node has without registering them.

A label is `key=value`, with Kubernetes' characters: a key of 1 to 63 and a value of 0 to
255 of `A-Z a-z 0-9 . _ / -` (a value may name a hostname, which is up to 255). Keys under
`node.` are the scheduler's: every node has `node.id=<its id>`, and a node whose
registration the operator vouched for `node.hostname=<its hostname>` (like Kubernetes'
kubernetes.io/hostname), so a job names a node with `node_selector: {"node.id": "n1"}`
(`scheduler submit --node n1`). The id is the token's (no one else registers it); a
hostname is only what a registration says, so a stranger's (the join key's) would pin
another host's jobs to it (store/scripts/nodes.py `vouches`). Both are bounded, since
they live in Redis and every placement may read them: at most MAX_LABELS keys, and a
selector at most MAX_LABELS values per key.

The key `namespace` is the namespaces' (models/namespace.py; docs/GUIDE.md, "Nodes for some
namespaces"): a node labelled `namespace=team-a` serves only team-a's jobs, and
`namespace=team-a.team-b` (names joined by NAMESPACE_JOIN, which no name holds) only those
two (`default` names the default namespace's). A node without it serves every namespace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from scheduler.models.namespace import DEFAULT, NAME_RE, shown
from scheduler.models.wire import InvalidInput

MAX_LABELS = 16
LABEL_KEY_RE = re.compile(r"[A-Za-z0-9._/-]{1,63}")
LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9._/-]{0,255}")
RESERVED_PREFIX = "node."
NODE_ID_LABEL, NODE_HOSTNAME_LABEL = "node.id", "node.hostname"
SYNTAX = "use 1 to 63 (key) and 0 to 255 (value) of A-Z a-z 0-9 . _ / -"
NAMESPACE_LABEL, NAMESPACE_JOIN = "namespace", "."

Selector = dict[str, str | list[str]]


def _check_pair(field: str, key: str, value: str) -> None:
    if not LABEL_KEY_RE.fullmatch(key):
        raise InvalidInput(f"invalid {field} key {key[:64]!r}: {SYNTAX}")
    if not LABEL_VALUE_RE.fullmatch(value):
        raise InvalidInput(f"invalid {field} value {value[:64]!r} for {key}: {SYNTAX}")


def check_labels(labels: Mapping[str, str]) -> None:
    """A registration's labels: bounded, Kubernetes' syntax, none under `node.`."""
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"invalid labels: at most {MAX_LABELS}")
    for key, value in labels.items():
        _check_pair("labels", key, value)
        if key.startswith(RESERVED_PREFIX):
            raise InvalidInput(f"invalid labels key {key!r}: {RESERVED_PREFIX}* is the scheduler's")
        if key == NAMESPACE_LABEL:
            _check_served(value)


def _check_served(value: str) -> None:
    """A `namespace` label's value: one or more namespace names, joined by NAMESPACE_JOIN."""
    names = value.split(NAMESPACE_JOIN)
    if not all(NAME_RE.fullmatch(name) for name in names) or len(set(names)) < len(names):
        raise InvalidInput(
            f"invalid labels value {value[:64]!r} for {NAMESPACE_LABEL}: the namespaces the node "
            f"serves, each once, joined by {NAMESPACE_JOIN!r} (team-a, or team-a.{DEFAULT})"
        )


def served(labels: Mapping[str, str]) -> frozenset[str] | None:
    """The namespaces a node with `labels` serves, as users name them (`default` for the
    default's); None: every namespace (no `namespace` label)."""
    value = labels.get(NAMESPACE_LABEL)
    return None if value is None else frozenset(value.split(NAMESPACE_JOIN))


def serves(labels: Mapping[str, str], namespace: str) -> bool:
    """Whether a node with `labels` may run a job of `namespace` (as stored: "" for
    `default`): it has no `namespace` label, or that label names it."""
    names = served(labels)
    return names is None or shown(namespace) in names


def check_selector(selector: Mapping[str, str | list[str]]) -> None:
    """A job's node_selector: each key a label, its value one allowed value or a list of
    1 to MAX_LABELS of them (any of which will do)."""
    if len(selector) > MAX_LABELS:
        raise InvalidInput(f"invalid node_selector: at most {MAX_LABELS} keys")
    for key, wanted in selector.items():
        values = [wanted] if isinstance(wanted, str) else wanted
        if not 1 <= len(values) <= MAX_LABELS:
            raise InvalidInput(
                f"invalid node_selector: {key[:64]!r} needs 1 to {MAX_LABELS} values"
            )
        for value in values:
            _check_pair("node_selector", key, value)


def node_labels(
    node_id: str, hostname: str, labels: Mapping[str, str], *, vouched: bool
) -> dict[str, str]:
    """Every label of a node: its registered ones and the scheduler's (its hostname only
    when the operator vouched for its registration)."""
    implicit = {NODE_ID_LABEL: node_id}
    if hostname and vouched:
        implicit[NODE_HOSTNAME_LABEL] = hostname
    return {**labels, **implicit}


def matches(selector: Mapping[str, str | list[str]], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` (node_labels) satisfies `selector`: every key present
    with one of its allowed values."""
    for key, wanted in selector.items():
        allowed = [wanted] if isinstance(wanted, str) else wanted
        if key not in labels or labels[key] not in allowed:
            return False
    return True


def selector_text(selector: Mapping[str, str | list[str]]) -> str:
    """`zone=a|b, node.id=n1`: a selector for people (the web UI's job page)."""
    return ", ".join(
        f"{key}={value if isinstance(value, str) else '|'.join(value)}"
        for key, value in sorted(selector.items())
    )


def parse_labels(text: str) -> dict[str, str]:
    """`zone=eu-1, gpu=a100` (AGENT_LABELS) as labels: spaces around keys and values ignored,
    empty items skipped, checked as `check_labels` does; a key given twice is refused, not
    overwritten."""
    labels: dict[str, str] = {}
    for item in text.split(","):
        entry = item.strip()
        if not entry:
            continue
        key, sep, value = (part.strip() for part in entry.partition("="))
        if not sep:
            raise InvalidInput(f"{entry!r} is not key=value")
        if key in labels:
            raise InvalidInput(f"label key {key!r} given twice")
        labels[key] = value
    check_labels(labels)
    return labels

"""Node labels (issue 24): what a label may be, and the `key=value,key2=value2` form an agent
is given them in (AGENT_LABELS).

A node registers its labels (`NodeRegistration.labels`) and a job's `node_selector` names
labels it needs. Both are bounded, since every node's labels live in Redis and in every
`GET /nodes`; the characters are Kubernetes' label characters, which need no quoting in a
URL, a shell or a Redis key.
"""

from __future__ import annotations

import re

from scheduler.models.wire import InvalidInput

MAX_LABELS = 16
LABEL_KEY_MAX, LABEL_VALUE_MAX = 63, 255
LABEL_KEY_RE = re.compile(rf"[A-Za-z0-9._/-]{{1,{LABEL_KEY_MAX}}}")
LABEL_VALUE_RE = re.compile(rf"[A-Za-z0-9._/-]{{1,{LABEL_VALUE_MAX}}}")
# Labels every node has without registering them (`node.id`, `node.hostname`: naming a node
# is selecting on them), so a node may not set them itself.
IMPLICIT_PREFIX = "node."


def check_labels(labels: dict[str, str]) -> None:
    """InvalidInput naming the first label that is not one a node may register."""
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"{len(labels)} labels: at most {MAX_LABELS}")
    for key, value in labels.items():
        if not LABEL_KEY_RE.fullmatch(key):
            raise InvalidInput(
                f"label key {key!r}: use 1 to {LABEL_KEY_MAX} of A-Z a-z 0-9 . _ / -"
            )
        if key.startswith(IMPLICIT_PREFIX):
            raise InvalidInput(f"label key {key!r}: {IMPLICIT_PREFIX}* labels are implicit")
        if not LABEL_VALUE_RE.fullmatch(value):
            raise InvalidInput(
                f"label {key}={value!r}: use 1 to {LABEL_VALUE_MAX} of A-Z a-z 0-9 . _ / -"
            )


def parse_labels(text: str) -> dict[str, str]:
    """`zone=eu-1, gpu=a100` as labels (spaces around keys and values ignored, empty items
    skipped), checked as `check_labels` does; a key given twice is refused, not overwritten."""
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

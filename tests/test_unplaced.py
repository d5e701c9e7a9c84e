"""Why a job waits on no node, in words from the job itself (models/unplaced.py): what it
asks that no node meets, the namespace no node serves; the reasons that pass by themselves
and those that last, each reason in one group."""

from __future__ import annotations

import pytest

from scheduler.models.job import PENDING_REASONS
from scheduler.models.unplaced import LASTING, WAITS_BY_ITSELF, asks_said, why


@pytest.mark.parametrize(
    ("cpus", "memory_mb", "selector", "said"),
    [
        (99, 0, {}, "offers 99 cpus"),
        (0, 512, {}, "offers 512 MB of memory"),
        (2, 64, {}, "offers 2 cpus and 64 MB of memory"),
        (0, 0, {"node.id": "n9"}, "matches node.id=n9"),
        (1, 0, {"zone": ["a", "b"], "disk": "ssd"}, "offers 1 cpus and matches disk=ssd zone=a,b"),
        (0, 0, {}, ""),
    ],
)
def test_what_a_job_asks_is_said_as_no_node_offers_it(
    cpus: int, memory_mb: int, selector: dict[str, object], said: str
) -> None:
    assert asks_said(cpus, memory_mb, selector) == said


@pytest.mark.parametrize(
    ("reason", "job", "said"),
    [
        ("no_fit", {"cpus": 99}, "no live node offers 99 cpus"),
        ("no_fit", {}, PENDING_REASONS["no_fit"]),  # asks nothing: the reason's own words
        ("namespace", {"namespace": "team-a"}, "no live node serves namespace 'team-a'"),
        ("namespace", {}, "no live node serves namespace 'default'"),
        ("exceeds_quota", {"namespace": "t"}, "it asks more than namespace 't''s quota allows"),
        ("full", {"cpus": 4}, PENDING_REASONS["full"]),
        ("drained", {}, PENDING_REASONS["drained"]),
        ("an_unknown_one", {}, "an_unknown_one"),  # a newer version's reason: as it is
    ],
)
def test_a_reason_is_said_with_the_jobs_own_asks(
    reason: str, job: dict[str, object], said: str
) -> None:
    assert why(reason, **job).startswith(said)  # type: ignore[arg-type]


def test_every_reason_either_passes_by_itself_or_lasts() -> None:
    assert set(LASTING) | set(WAITS_BY_ITSELF) == set(PENDING_REASONS)
    assert not set(LASTING) & set(WAITS_BY_ITSELF)

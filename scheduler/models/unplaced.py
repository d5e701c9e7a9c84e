"""Why a job waits on no node, said from the job itself (PENDING_REASONS' reasons): what it
asks that no live node meets, the namespace no node serves. The job page (api/ui_job.py
reason) and the CLI's warning at submit (cli/output.py unplaced_warning) say it alike. Pure:
no I/O here.

A reason either passes by itself as the jobs ahead end (WAITS_BY_ITSELF: the nodes that fit
are busy, the namespace runs all its quota allows) or lasts until someone acts (LASTING: a
node to register, label, undrain, a quota to raise), which the CLI warns of when it submits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.models.job import PENDING_REASONS, Job

WAITS_BY_ITSELF = ("full", "quota")
LASTING = tuple(reason for reason in PENDING_REASONS if reason not in WAITS_BY_ITSELF)

# What a job asks of its node, each with its unit as said ("99 cpus", "512 MB of memory").
_OFFERS = (("cpus", "cpus"), ("memory_mb", "MB of memory"))


def asks_said(cpus: int, memory_mb: int, node_selector: Mapping[str, object]) -> str:
    """What a job asks, as no node offers it: `offers 99 cpus and 512 MB of memory and
    matches node.id=n9 zone=a,b` ("" when it asks nothing)."""
    asks = {"cpus": cpus, "memory_mb": memory_mb}
    offers = [f"{asks[name]} {unit}" for name, unit in _OFFERS if asks[name]]
    parts = [f"offers {' and '.join(offers)}"] if offers else []
    if node_selector:
        labels = " ".join(f"{k}={_one_of(v)}" for k, v in sorted(node_selector.items()))
        parts.append(f"matches {labels}")
    return " and ".join(parts)


def _one_of(value: object) -> str:
    """A selector's value as --select takes it: `a,b` for any of a list."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ",".join(map(str, value))
    return str(value)


def why(
    reason: str,
    *,
    cpus: int = 0,
    memory_mb: int = 0,
    node_selector: Mapping[str, object] | None = None,
    namespace: str = "",
) -> str:
    """The reason in words, with the job's own asks and namespace where they are the cause:
    `no live node offers 99 cpus` rather than "its node_selector and resources"."""
    shown = repr(namespace or "default")
    if reason == "no_fit":
        asks = asks_said(cpus, memory_mb, node_selector or {})
        return f"no live node {asks}" if asks else PENDING_REASONS[reason]
    if reason == "namespace":
        return f"no live node serves namespace {shown}"
    if reason == "exceeds_quota":
        return (
            f"it asks more than namespace {shown}'s quota allows at all: it waits until the "
            "quota is raised"
        )
    return PENDING_REASONS.get(reason, reason)


def why_of(job: Job) -> str:
    """`why` of a job's pending_reason, from its own asks and namespace."""
    return why(
        job.pending_reason,
        cpus=job.cpus,
        memory_mb=job.memory_mb,
        node_selector=job.node_selector,
        namespace=job.namespace,
    )

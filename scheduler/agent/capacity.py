"""What this node offers its jobs, and what one job gets of it (issue 24).

The offer (cpus, memory, labels) goes to the registry at registration, and the scheduler
binds a job to a node only where what it asks fits beside what the node's jobs hold. The
agent is the last guard (a node re-registered with less, a scheduler that does not place by
resources):
- a job asking more than the node offers can never run here: it is claimed and reported
  `failed` with a line saying so (`refusal`), never left pending in silence;
- a job that fits the offer but not beside the jobs running now waits in the node's queue,
  as a job does on a full node (`fits_now`), and starts once they end: only the agent's view
  of what is free can lag the scheduler's, so refusing it would fail a job for a moment's
  difference;
- a job that runs gets exactly what it asked as its limits (`limits_for`).

A job holds what it asked and nothing more, as the scheduler counts: one asking nothing
holds nothing and runs under the agent's defaults (AGENT_RUN_*, AGENT_SERVICE_*), capped in
number by MAX_JOBS_PER_NODE as before.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.agent.limits import Limits, Mount, inside, own_cgroups, read_mounts

if TYPE_CHECKING:
    from scheduler.models.job import Job

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Offer:
    """What the node registers. A resource at 0 is not said, and not checked: the
    scheduler reads a node's 0 so too."""

    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    memory_mb: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ask:
    """What a job asked, which it holds on the node while it runs; 0 = not asked."""

    cpus: int = 0
    memory_mb: int = 0

    @classmethod
    def of(cls, job: Job) -> Ask:
        # A negative ask (no scheduler of ours accepts one) is no ask, not a credit.
        return cls(max(job.cpus, 0), max(job.memory_mb, 0))

    def pairs(self, offer: Offer) -> tuple[tuple[str, int, int], ...]:
        """(field name, asked, offered) per resource."""
        return (("cpus", self.cpus, offer.cpus), ("memory_mb", self.memory_mb, offer.memory_mb))


def limits_for(ask: Ask, default: Limits) -> Limits:
    """The job's limits: what it asked, else the agent's default for its kind."""
    memory = ask.memory_mb * MiB if ask.memory_mb else default.memory_bytes
    return Limits(memory, ask.cpus or default.cpus)


def refusal(ask: Ask, offer: Offer, node_id: str) -> str:
    """Why a job asking `ask` can never run on this node, one line per resource; "" when it
    can."""
    return "".join(
        f"agent: job asks {name}={asked}, node {node_id} offers {offered}\n"
        for name, asked, offered in ask.pairs(offer)
        if offered and asked > offered
    )


def fits_now(ask: Ask, offer: Offer, held: Iterable[Ask]) -> bool:
    """Whether the job fits beside the running jobs, which hold `held`."""
    holding = list(held)
    used = Ask(sum(h.cpus for h in holding), sum(h.memory_mb for h in holding))
    return all(
        not offered or not asked or asked + in_use <= offered
        for (_, asked, offered), (_, in_use, _) in zip(
            ask.pairs(offer), used.pairs(offer), strict=True
        )
    )


# The memory the node offers: AGENT_MEMORY_MB, else the machine's (MemTotal), or the limit of
# the cgroup the agent runs under when lower (a container's), since its jobs' cgroups are
# children of that one and cannot have more.

LIMIT_FILES = {"cgroup2": "memory.max", "cgroup": "memory.limit_in_bytes"}


def meminfo_total_mb(meminfo: str) -> int:
    """MemTotal of /proc/meminfo in MiB; 0 when it does not say."""
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "MemTotal":
            with contextlib.suppress(ValueError, IndexError):
                return int(rest.split()[0]) // 1024  # in kB
    return 0


def cgroup_limits_mb(mounts: list[Mount], paths: dict[str, str]) -> list[int]:
    """The memory limits (MiB) of the agent's cgroup and of each cgroup above it that the
    mounts show, v2 and v1 alike; unlimited ones ("max", or v1's near 2^63) are left out or
    are larger than any machine's memory."""
    found = []
    for mount in mounts:
        controller = "" if mount.fstype == "cgroup2" else "memory"
        if controller not in paths or (controller and controller not in mount.options):
            continue
        own = inside(mount, paths[controller])
        if own is None:
            continue
        for directory in (own, *own.parents):
            if not directory.is_relative_to(mount.point):
                break
            with contextlib.suppress(OSError, ValueError):
                found.append(int((directory / LIMIT_FILES[mount.fstype]).read_text()) // MiB)
    return found


def memory_offer_mb(setting_mb: int, proc: Path = Path("/proc")) -> int:
    """What the node offers in MiB: `setting_mb` (AGENT_MEMORY_MB) when set; else the least
    of MemTotal and the cgroup limits above the agent; 0 (not said) when none can be read."""
    if setting_mb:
        return setting_mb
    try:
        total = meminfo_total_mb((proc / "meminfo").read_text())
        mounts = read_mounts((proc / "self" / "mountinfo").read_text())
        paths = own_cgroups((proc / "self" / "cgroup").read_text())
    except OSError:
        return 0
    return min([mb for mb in (total, *cgroup_limits_mb(mounts, paths)) if mb > 0], default=0)

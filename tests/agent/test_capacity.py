"""What the node offers its jobs and what one job gets of it (agent/capacity.py): the pure
rules as tables, and the memory found on a machine laid out in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.agent.capacity import (
    Ask,
    Offer,
    cgroup_limits_mb,
    fits_now,
    limits_for,
    meminfo_total_mb,
    memory_offer_mb,
    refusal,
)
from scheduler.agent.executor import AgentJob
from scheduler.agent.limits import Limits, read_mounts

MiB = 1024 * 1024
RUN = Limits(512 * MiB, 1)
NODE = Offer(cpus=4, memory_mb=4096)


@pytest.mark.parametrize(
    "cpus, memory_mb, limits",
    [
        (0, 0, RUN),  # asks nothing: the agent's default for its kind
        (0, 64, Limits(64 * MiB, 1)),
        (3, 0, Limits(512 * MiB, 3)),
        (2, 8192, Limits(8192 * MiB, 2)),
        (-1, -5, RUN),  # a negative ask is no ask
    ],
)
def test_a_job_runs_with_what_it_asked_else_the_default(
    cpus: int, memory_mb: int, limits: Limits
) -> None:
    job = AgentJob(job_id="job-1", command="true", cpus=cpus, memory_mb=memory_mb)
    assert limits_for(Ask.of(job), RUN) == limits


@pytest.mark.parametrize(
    "ask, offer, reason",
    [
        (Ask(), NODE, ""),
        (Ask(4, 4096), NODE, ""),  # exactly the offer fits
        (Ask(0, 8192), NODE, "agent: job asks memory_mb=8192, node n1 offers 4096\n"),
        (Ask(5, 0), NODE, "agent: job asks cpus=5, node n1 offers 4\n"),
        (
            Ask(8, 5000),
            NODE,
            "agent: job asks cpus=8, node n1 offers 4\n"
            "agent: job asks memory_mb=5000, node n1 offers 4096\n",
        ),
        (Ask(2, 10**9), Offer(cpus=4, memory_mb=0), ""),  # memory not said: not checked
    ],
)
def test_a_job_asking_more_than_the_node_offers_is_refused_saying_why(
    ask: Ask, offer: Offer, reason: str
) -> None:
    assert refusal(ask, offer, "n1") == reason


@pytest.mark.parametrize(
    "ask, held, fits",
    [
        (Ask(), [Ask(4, 4096)], True),  # asks nothing: holds nothing, needs nothing
        (Ask(2, 2048), [], True),
        (Ask(2, 2048), [Ask(2, 2048)], True),  # exactly full
        (Ask(0, 2049), [Ask(2, 2048)], False),
        (Ask(3, 0), [Ask(1, 0), Ask(1, 0)], False),
        (Ask(3, 0), [Ask(1, 0), Ask(1, 4000), Ask()], False),
        (Ask(0, 96), [Ask(3, 4000)], True),
    ],
)
def test_a_job_fits_now_beside_what_the_running_jobs_hold(
    ask: Ask, held: list[Ask], fits: bool
) -> None:
    assert fits_now(ask, NODE, held) is fits


def test_a_resource_the_node_does_not_offer_is_not_counted() -> None:
    assert fits_now(Ask(1, 10**6), Offer(cpus=0, memory_mb=0), [Ask(10**6, 10**6)])


@pytest.mark.parametrize(
    "meminfo, mb",
    [
        ("MemTotal:       24683792 kB\nMemFree:  100 kB\n", 24105),
        ("MemFree: 1 kB\n", 0),
        ("MemTotal: lots\n", 0),
        ("", 0),
    ],
)
def test_meminfo_total(meminfo: str, mb: int) -> None:
    assert meminfo_total_mb(meminfo) == mb


def lay_out(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_limits_of_the_agents_cgroup_and_those_above_it_are_found(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "unified", tmp_path / "memory"
    lay_out(
        tmp_path,
        {
            "unified/memory.max": "max\n",  # the root: unlimited
            "unified/pod/memory.max": f"{3 * 1024 * MiB}\n",
            "unified/pod/agent/memory.max": "max\n",
            # The v1 mount shows the hierarchy from /docker/abc down.
            "memory/memory.limit_in_bytes": f"{2048 * MiB}\n",
            "memory/sub/memory.limit_in_bytes": "9223372036854771712\n",
        },
    )
    mountinfo = (
        f"35 31 0:32 /docker/abc {v1} rw - cgroup cgroup rw,memory\n"
        f"36 31 0:33 / {tmp_path / 'cpu'} rw - cgroup cgroup rw,cpu\n"
        f"41 31 0:38 / {v2} rw - cgroup2 cgroup2 rw\n"
    )
    paths = {"memory": "/docker/abc/sub", "cpu": "/", "": "/pod/agent"}
    found = sorted(cgroup_limits_mb(read_mounts(mountinfo), paths))
    # v1: sub (2^63, unlimited) and the mount's root, /docker/abc (2048); nothing above the
    # mount is read. v2: pod/agent (max), pod (3072), the root (max).
    assert found == [2048, 3072, 9223372036854771712 // MiB]


def fake_proc(root: Path, meminfo: str, limit_mb: int | None) -> Path:
    cgroup = root / "cg"
    lay_out(
        root,
        {
            "proc/meminfo": meminfo,
            "proc/self/mountinfo": f"41 31 0:38 / {cgroup} rw - cgroup2 cgroup2 rw\n",
            "proc/self/cgroup": "0::/agent\n",
            "cg/agent/memory.max": "max\n" if limit_mb is None else f"{limit_mb * MiB}\n",
        },
    )
    return root / "proc"


@pytest.mark.parametrize(
    "setting, meminfo, limit_mb, offered",
    [
        (0, "MemTotal: 8388608 kB\n", None, 8192),  # the machine's
        (0, "MemTotal: 8388608 kB\n", 1536, 1536),  # the agent's cgroup, lower
        (0, "MemTotal: 1048576 kB\n", 4096, 1024),  # a cgroup above the machine: the machine
        (0, "", None, 0),  # nothing to read: not said
        (0, "", 700, 700),
        (6000, "MemTotal: 8388608 kB\n", 1536, 6000),  # AGENT_MEMORY_MB: the operator's word
    ],
)
def test_the_memory_offered(
    tmp_path: Path, setting: int, meminfo: str, limit_mb: int | None, offered: int
) -> None:
    assert memory_offer_mb(setting, fake_proc(tmp_path, meminfo, limit_mb)) == offered


def test_this_machines_memory_is_offered() -> None:
    total = meminfo_total_mb(Path("/proc/meminfo").read_text())
    assert 0 < memory_offer_mb(0) <= total

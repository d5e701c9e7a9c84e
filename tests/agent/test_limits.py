"""Resource limits really apply: jobs run through the exec wrapper under each way of limiting
that works on this machine (a cgroup hierarchy if one is writable, and rlimits always)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.agent import limits as agent_limits
from scheduler.agent.limits import (
    Cgroup1Backend,
    Cgroup2Backend,
    Limits,
    RlimitBackend,
    detect,
    own_cgroups,
    read_mounts,
    wrapper_command,
)

MiB = 1024 * 1024
RUN = Limits(512 * MiB, 1)
ALLOCATE_1G = 'python3 -c "b = bytearray(1 << 30); print(len(b))"'

# Every way of limiting that works here: what `auto` picks, and the rlimit fallback.
BACKENDS = sorted({detect("auto").name, "rlimit"})


def run(backend_name: str, command: str, limits: Limits = RUN) -> subprocess.CompletedProcess[str]:
    backend = detect(backend_name)
    conf = backend.confine("job-1", limits)
    try:
        return subprocess.run(
            wrapper_command(conf, ["sh", "-c", command]),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        conf.remove()


@pytest.mark.parametrize("backend", BACKENDS)
def test_allocating_1_gib_under_512_mib_fails(backend: str) -> None:
    result = run(backend, ALLOCATE_1G)
    assert result.returncode != 0
    assert str(1 << 30) not in result.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_allocating_within_the_limit_works(backend: str) -> None:
    result = run(backend, 'python3 -c "b = bytearray(100 << 20); print(len(b))"')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(100 << 20)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_job_is_confined_to_one_cpu(backend: str) -> None:
    chosen = detect(backend)
    if isinstance(chosen, RlimitBackend) or (isinstance(chosen, Cgroup1Backend) and not chosen.cpu):
        # Pinned to one core.
        result = run(backend, "grep Cpus_allowed_list /proc/self/status")
        allowed = result.stdout.split()[-1]
        assert "-" not in allowed and "," not in allowed, allowed
        return
    # A CFS quota of one period per period: one CPU.
    script = (
        "p=$(grep -E '^[0-9]+:(cpu|cpu,cpuacct|cpuacct,cpu):' /proc/self/cgroup | cut -d: -f3); "
        "cat /sys/fs/cgroup/cpu$p/cpu.cfs_quota_us /sys/fs/cgroup/cpu$p/cpu.cfs_period_us "
        "2>/dev/null || cat /sys/fs/cgroup$(grep '^0::' /proc/self/cgroup | cut -d: -f3)/cpu.max"
    )
    result = run(backend, script)
    values = result.stdout.split()
    assert values[0] == values[1] == "100000", result.stdout


def test_rlimit_backend_caps_the_address_space_of_the_job() -> None:
    result = run("rlimit", "ulimit -v")
    assert int(result.stdout.strip()) * 1024 == RUN.memory_bytes


def test_rlimit_backend_spreads_jobs_over_the_cores() -> None:
    backend = RlimitBackend()
    backend.cpus = [0, 1, 2, 3]
    assert [backend.cpu_list(1) for _ in range(5)] == ["0", "1", "2", "3", "0"]
    assert backend.cpu_list(2) == "1,2"
    assert backend.cpu_list(9) == "0,1,2,3"


def test_a_cgroup_backend_is_used_when_the_machine_has_a_writable_hierarchy() -> None:
    mounts = read_mounts(Path("/proc/self/mountinfo").read_text())
    paths = own_cgroups(Path("/proc/self/cgroup").read_text())
    found = agent_limits.detect_cgroup2(mounts, paths) or agent_limits.detect_cgroup1(mounts, paths)
    assert detect("auto").name == (found.name if found else "rlimit")


@pytest.mark.skipif(detect("auto").name == "rlimit", reason="no writable cgroup hierarchy")
def test_a_cgroup_job_runs_in_its_own_cgroup_and_leftovers_are_killed() -> None:
    backend = detect("auto")
    conf = backend.confine("job-7", RUN)
    try:
        proc = subprocess.Popen(
            wrapper_command(conf, ["sh", "-c", "sleep 300 & echo $!; cat /proc/self/cgroup"]),
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        first = proc.stdout.readline() if proc.stdout else ""
        orphan = int(first)
        proc.wait(timeout=30)
        assert "tinyaws-job-7-" in Path(f"/proc/{orphan}/cgroup").read_text()
    finally:
        conf.remove()
    assert all(not d.exists() for d in conf.dirs)
    assert not Path(f"/proc/{orphan}").exists() or "Z" in _state(orphan)
    if proc.stdout:
        proc.stdout.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "Z"


def test_cgroup2_backend_writes_the_limits_and_the_wrapper_joins_the_cgroup(
    tmp_path: Path,
) -> None:
    conf = Cgroup2Backend(tmp_path).confine("job-3", Limits(256 * MiB, 2))
    (job_dir,) = conf.dirs
    assert job_dir.parent == tmp_path and job_dir.name.startswith("tinyaws-job-3-")
    assert (job_dir / "memory.max").read_text() == str(256 * MiB)
    assert (job_dir / "cpu.max").read_text() == "200000 100000"
    assert conf.wrapper_args == ["--procs", str(job_dir / "cgroup.procs")]
    # The wrapper writes its own pid, then becomes the job (same pid).
    out = subprocess.run(
        wrapper_command(conf, ["sh", "-c", "echo $$"]), capture_output=True, text=True
    )
    assert (job_dir / "cgroup.procs").read_text() == out.stdout.strip()
    (job_dir / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert conf.oom_killed()
    shutil.rmtree(job_dir)


def test_a_hostile_job_id_cannot_escape_the_parent_cgroup(tmp_path: Path) -> None:
    conf = Cgroup2Backend(tmp_path).confine("../../etc", RUN)
    assert conf.dirs[0].parent == tmp_path
    assert conf.dirs[0].name.startswith("tinyaws-job-")
    shutil.rmtree(conf.dirs[0])


MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
PROC_CGROUP = """\
4:memory:/docker/abc/sub
1:cpu,cpuacct:/
0::/user.slice
"""


def test_mounts_and_own_cgroups_are_parsed() -> None:
    mounts = read_mounts(MOUNTINFO)
    assert [(m.fstype, str(m.point), m.root) for m in mounts] == [
        ("cgroup", "/sys/fs/cgroup/cpu", "/"),
        ("cgroup", "/sys/fs/cgroup/memory", "/docker/abc"),
        ("cgroup2", "/sys/fs/cgroup/unified", "/"),
    ]
    assert "cpuacct" in mounts[0].options
    paths = own_cgroups(PROC_CGROUP)
    assert paths == {"memory": "/docker/abc/sub", "cpu": "/", "cpuacct": "/", "": "/user.slice"}
    # A mount showing a sub-tree: the path is taken relative to the mount's root.
    assert agent_limits.inside(mounts[1], paths["memory"]) == Path("/sys/fs/cgroup/memory/sub")
    assert agent_limits.inside(mounts[1], "/other") is None


def test_the_wrapper_reports_bad_options_and_missing_commands() -> None:
    wrapper = [sys.executable, "-I", "-S", agent_limits.__file__]
    bad = subprocess.run([*wrapper, "--nope", "1", "--", "true"], capture_output=True, text=True)
    assert bad.returncode == 126 and "unknown option --nope" in bad.stderr
    missing = subprocess.run([*wrapper, "--", "/no/such/binary"], capture_output=True, text=True)
    assert missing.returncode == 127 and "cannot run /no/such/binary" in missing.stderr


def test_off_runs_the_command_as_is() -> None:
    conf = detect("off").confine("job-1", RUN)
    assert wrapper_command(conf, ["sh", "-c", "true"]) == ["sh", "-c", "true"]


def test_a_mode_that_cannot_work_here_is_an_error() -> None:
    for mode in ("cgroup2", "cgroup1"):
        try:
            backend = detect(mode)
        except ValueError as exc:
            assert mode in str(exc)
        else:
            assert backend.name == mode

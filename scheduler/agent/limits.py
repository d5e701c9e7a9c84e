"""Resource limits for the agent's jobs, really applied (the original wrote cgroup files but
never put the process in the cgroup, CONTRACT 8.16).

Three ways, tried in this order by `detect`:
  cgroup2  a child cgroup of the agent's own, with memory.max and cpu.max;
  cgroup1  child cgroups in the v1 memory and cpu hierarchies (memory.limit_in_bytes,
           cpu.cfs_quota_us); a hierarchy that is missing or read-only falls back as below;
  rlimit   RLIMIT_AS caps the address space of every process of the job, and CPU affinity pins
           it to N cores. Weaker: a job running as root can lift both, and programs that reserve
           much address space up front (Go, Java) may fail to start under RLIMIT_AS.
A cgroup also lets the agent kill everything a job left behind.

The limits are applied by a tiny exec wrapper (this file run as a script, stdlib only): it
joins the cgroups and sets the rlimits on itself, then execs the job, so nothing of the job
runs unconfined and the agent never needs a fork hook (unsafe with threads).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("scheduler.agent")

MODES = ("auto", "cgroup2", "cgroup1", "rlimit", "off")
CPU_PERIOD_US = 100_000
_names = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Limits:
    memory_bytes: int
    cpus: int


@dataclass(slots=True)
class Confinement:
    """One job's limits: the wrapper arguments to run it under, and its cgroups to clean up."""

    wrapper_args: list[str]
    dirs: list[Path] = field(default_factory=list)
    oom_file: Path | None = None

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this job for exceeding its memory limit."""
        if self.oom_file is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in self.oom_file.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value) > 0
        return False

    def kill_all(self) -> None:
        """SIGKILL every process still in the job's cgroups (children it left behind)."""
        for directory in self.dirs:
            kill = directory / "cgroup.kill"
            if kill.exists():
                with contextlib.suppress(OSError):
                    kill.write_text("1")
                    continue
            for pid in _pids(directory):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self, timeout: float = 2.0) -> None:
        """Kill what is left and remove the cgroups (a cgroup can only go once empty)."""
        self.kill_all()
        deadline = time.monotonic() + timeout
        for directory in self.dirs:
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        log.warning("could not remove cgroup %s", directory)
                        break
                    time.sleep(0.02)


def _pids(directory: Path) -> list[int]:
    try:
        return [int(pid) for pid in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


class Backend:
    """Applies limits one way; `confine` prepares one job."""

    name = "off"

    def confine(self, tag: str, limits: Limits) -> Confinement:
        return Confinement([])


class RlimitBackend(Backend):
    name = "rlimit"

    def __init__(self) -> None:
        self.cpus = sorted(os.sched_getaffinity(0))
        self._next = 0

    def cpu_list(self, count: int) -> str:
        """`count` cores, rotating so that concurrent jobs spread over the machine."""
        count = max(1, min(count, len(self.cpus)))
        chosen = [self.cpus[(self._next + i) % len(self.cpus)] for i in range(count)]
        self._next = (self._next + count) % len(self.cpus)
        return ",".join(map(str, sorted(set(chosen))))

    def confine(self, tag: str, limits: Limits) -> Confinement:
        args = ["--rlimit-as", str(limits.memory_bytes), "--cpu-list", self.cpu_list(limits.cpus)]
        return Confinement(args)


def _job_dir(parent: Path, tag: str) -> Path:
    safe = tag if tag.replace("-", "").replace("_", "").isalnum() else "job"
    return parent / f"tinyaws-{safe}-{os.getpid()}-{next(_names)}"


class Cgroup2Backend(Backend):
    name = "cgroup2"

    def __init__(self, parent: Path) -> None:
        self.parent = parent

    def confine(self, tag: str, limits: Limits) -> Confinement:
        directory = _job_dir(self.parent, tag)
        directory.mkdir()
        conf = Confinement(["--procs", str(directory / "cgroup.procs")], [directory])
        conf.oom_file = directory / "memory.events"
        try:
            (directory / "memory.max").write_text(str(limits.memory_bytes))
            with contextlib.suppress(OSError):  # absent without swap accounting
                (directory / "memory.swap.max").write_text("0")
            (directory / "cpu.max").write_text(f"{limits.cpus * CPU_PERIOD_US} {CPU_PERIOD_US}")
        except OSError:
            conf.remove()
            raise
        return conf


class Cgroup1Backend(Backend):
    name = "cgroup1"

    def __init__(self, memory: Path, cpu: Path | None) -> None:
        self.memory = memory
        self.cpu = cpu
        self.affinity = RlimitBackend() if cpu is None else None

    def confine(self, tag: str, limits: Limits) -> Confinement:
        conf = Confinement([])
        try:
            mem = _job_dir(self.memory, tag)
            mem.mkdir()
            conf.dirs.append(mem)
            conf.oom_file = mem / "memory.oom_control"
            (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            with contextlib.suppress(OSError):  # absent without swap accounting
                (mem / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
            conf.wrapper_args += ["--procs", str(mem / "cgroup.procs")]
            if self.cpu is not None:
                cpu = _job_dir(self.cpu, tag)
                cpu.mkdir()
                conf.dirs.append(cpu)
                (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (cpu / "cpu.cfs_quota_us").write_text(str(limits.cpus * CPU_PERIOD_US))
                conf.wrapper_args += ["--procs", str(cpu / "cgroup.procs")]
            elif self.affinity is not None:
                conf.wrapper_args += ["--cpu-list", self.affinity.cpu_list(limits.cpus)]
        except OSError:
            conf.remove()
            raise
        return conf


# Discovery: where the agent's own cgroups are.


@dataclass(frozen=True, slots=True)
class Mount:
    root: str  # the part of the hierarchy this mount shows
    point: Path
    fstype: str
    options: frozenset[str]


def read_mounts(mountinfo: str) -> list[Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        parts, rest = head.split(), tail.split()
        if not sep or len(parts) < 5 or len(rest) < 3:
            continue
        if rest[0] in ("cgroup", "cgroup2"):
            options = frozenset(rest[2].split(","))
            mounts.append(Mount(parts[3], Path(parts[4]), rest[0], options))
    return mounts


def own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """Controller name -> this process's cgroup path ("" is the v2 unified hierarchy)."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def inside(mount: Mount, path: str) -> Path | None:
    """The directory of cgroup `path` under `mount`, if the mount shows it."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return mount.point / path[len(root) :].lstrip("/")


def _probe(directory: Path, limit_file: str) -> bool:
    probe = directory / f"tinyaws-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        (probe / limit_file).write_text(str(512 * 1024 * 1024))
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _enable_controllers(own: Path) -> bool:
    """Enable memory and cpu for children of `own`. cgroup v2 forbids that while `own` holds
    processes, so the agent first moves itself into a leaf `agent` child."""
    wanted = {"memory", "cpu"}
    subtree = own / "cgroup.subtree_control"
    if wanted <= set(subtree.read_text().split()):
        return True
    try:
        subtree.write_text("+memory +cpu")
        return True
    except OSError:
        pass
    leaf = own / "agent"
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
        subtree.write_text("+memory +cpu")
        return True
    except OSError:  # other processes share `own`: put things back as they were
        with contextlib.suppress(OSError):
            (own / "cgroup.procs").write_text(str(os.getpid()))
            leaf.rmdir()
        return False


def detect_cgroup2(mounts: list[Mount], paths: dict[str, str]) -> Backend | None:
    if "" not in paths:
        return None
    for mount in (m for m in mounts if m.fstype == "cgroup2"):
        own = inside(mount, paths[""])
        if own is None:
            continue
        try:
            available = set((own / "cgroup.controllers").read_text().split())
            wanted = {"memory", "cpu"} <= available
            if wanted and _enable_controllers(own) and _probe(own, "memory.max"):
                return Cgroup2Backend(own)
        except OSError:
            continue
    return None


def _v1_dir(mounts: list[Mount], paths: dict[str, str], controller: str) -> Path | None:
    for mount in mounts:
        if mount.fstype == "cgroup" and controller in mount.options and controller in paths:
            directory = inside(mount, paths[controller])
            if directory is not None and directory.is_dir():
                return directory
    return None


def detect_cgroup1(mounts: list[Mount], paths: dict[str, str]) -> Backend | None:
    memory = _v1_dir(mounts, paths, "memory")
    if memory is None or not _probe(memory, "memory.limit_in_bytes"):
        return None
    cpu = _v1_dir(mounts, paths, "cpu")
    if cpu is not None and not _probe(cpu, "cpu.cfs_quota_us"):
        cpu = None
    return Cgroup1Backend(memory, cpu)


def detect(mode: str = "auto") -> Backend:
    """The best way to limit jobs on this machine, or exactly `mode` (ValueError if it cannot
    work here)."""
    if mode == "off":
        return Backend()
    if mode == "rlimit":
        return RlimitBackend()
    try:
        mounts = read_mounts(Path("/proc/self/mountinfo").read_text())
        paths = own_cgroups(Path("/proc/self/cgroup").read_text())
    except OSError:
        mounts, paths = [], {}
    for name, find in (("cgroup2", detect_cgroup2), ("cgroup1", detect_cgroup1)):
        if mode in ("auto", name):
            backend = find(mounts, paths)
            if backend is not None:
                return backend
            if mode == name:
                raise ValueError(f"AGENT_LIMITS={name}: no writable {name} hierarchy here")
    return RlimitBackend()


def wrapper_command(conf: Confinement, argv: list[str]) -> list[str]:
    """The command line that runs `argv` under `conf`."""
    if not conf.wrapper_args:
        return argv
    return [sys.executable, "-I", "-S", __file__, *conf.wrapper_args, "--", *argv]


# The exec wrapper (runs as a script: no imports from the package).


def _apply(args: list[str]) -> list[str]:
    """Apply the options in `args` to this process; return the command after `--`."""
    while args and args[0] != "--":
        option, value, args = args[0], args[1], args[2:]
        if option == "--procs":
            with open(value, "w") as procs:
                procs.write(str(os.getpid()))
        elif option == "--rlimit-as":
            resource.setrlimit(resource.RLIMIT_AS, (int(value), int(value)))
        elif option == "--cpu-list":
            os.sched_setaffinity(0, {int(cpu) for cpu in value.split(",")})
        else:
            raise ValueError(f"unknown option {option}")
    return args[1:]


def main(argv: list[str]) -> int:
    try:
        command = _apply(argv)
    except (OSError, ValueError, IndexError, OverflowError) as exc:  # a huge limit too
        print(f"agent: cannot apply resource limits: {exc}", file=sys.stderr)
        return 126
    if not command:
        print("agent: no command", file=sys.stderr)
        return 126
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"agent: cannot run {command[0]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

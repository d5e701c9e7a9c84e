"""The agent's job execution: bounded output, process cleanup, timeouts, deploy archives,
services. Processes are real; HTTP downloads go to an in-process transport."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import time
import zipfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from scheduler.agent.deploy import DeployError, download, extract
from scheduler.agent.executor import (
    NO_START_SCRIPT,
    AgentJob,
    BoundedBuffer,
    ExecConfig,
    Executor,
    Outcome,
    Service,
    capture,
    exit_code,
    job_env,
    signal_note,
)
from scheduler.agent.limits import Backend, Confinement, Limits, RlimitBackend
from scheduler.models.job import bound_output

MiB = 1024 * 1024


def test_bounded_buffer_keeps_the_first_bytes_and_counts_the_rest() -> None:
    buf = BoundedBuffer(1000)
    for _ in range(100):
        buf.feed(b"x" * 100)
    text = buf.text()
    kept = 1000 - BoundedBuffer.MARKER_ROOM
    assert text.startswith("x" * kept) and "x" * (kept + 1) not in text
    assert f"{10_000 - kept} bytes dropped" in text
    assert len(buf.data) == kept


def test_bounded_output_fits_under_the_schedulers_cap_untouched() -> None:
    buf = BoundedBuffer(2048)
    buf.feed(b"\xff" * 5000)  # invalid UTF-8 widens into replacement characters
    text = buf.text()
    assert len(text.encode()) <= 2048
    assert bound_output(text, 2048) == text


def test_short_output_is_unchanged() -> None:
    buf = BoundedBuffer(4096)
    buf.feed("héllo\n".encode())
    assert buf.text() == "héllo\n"


def test_job_env_hides_the_agents_secrets_and_injects_env_vars() -> None:
    base = {"PATH": "/bin", "TINYAWS_API_KEY": "k", "REDIS_URL": "redis://x", "FOO": "agent"}
    base["AGENT_JOIN_KEY"] = "j"  # registers any node id: a job holding it takes others' jobs
    job = AgentJob(job_id="job-1", env_vars={"FOO": "job", "BAR": "1"}, port=8080)
    assert job_env(job, base) == {"PATH": "/bin", "FOO": "job", "BAR": "1", "PORT": "8080"}


def _capture(command: str, timeout: float | None = 30, **kw: object) -> Outcome:
    async def go() -> Outcome:
        abort = asyncio.Event()
        return await capture(
            ["sh", "-c", command],
            env=dict(os.environ),
            cwd=Path.cwd(),
            conf=Confinement([]),
            output_limit=int(kw.get("limit", 4096)),  # type: ignore[call-overload]
            timeout=timeout,
            abort=abort,
        )

    return asyncio.run(go())


def test_capture_reports_exit_code_and_both_streams() -> None:
    out = _capture("echo out; echo err >&2; exit 3")
    assert out == Outcome(3, "out\n", "err\n")
    assert out.status == "failed"


def test_a_job_printing_megabytes_is_cut_to_the_limit() -> None:
    out = _capture("head -c 5000000 /dev/zero | tr '\\0' a", limit=8192)
    assert out.exit_code == 0
    assert len(out.stdout.encode()) <= 8192
    assert "bytes dropped" in out.stdout
    assert out.stdout.startswith("a" * 8000)


def test_background_children_do_not_hold_the_job_open_and_are_killed() -> None:
    out = _capture("sleep 300 & echo $!")
    pid = int(out.stdout)
    assert out.exit_code == 0
    assert _gone(pid)


def _gone(pid: int, timeout: float = 10) -> bool:
    """Whether `pid` is dead (or a zombie) within `timeout`: a SIGKILL is delivered
    asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


@pytest.mark.parametrize(("sig", "name"), [(9, "SIGKILL"), (15, "SIGTERM"), (6, "SIGABRT")])
def test_a_job_killed_by_a_signal_says_which_as_a_shell_does(sig: int, name: str) -> None:
    """128+n as a shell's $?, and the signal's name on stderr (the original's -1 lost it)."""
    out = _capture(f"echo before >&2; kill -{sig} $$")
    assert out == Outcome(128 + sig, "", f"before\nsignal: {name} (exit_code {128 + sig})\n")
    assert out.status == "failed"


def test_exit_codes_of_signals_and_of_no_status() -> None:
    assert [exit_code(c) for c in (0, 3, -9, None)] == [0, 3, 137, -1]
    assert signal_note(0) == signal_note(None) == ""
    assert signal_note(-200) == "signal: signal 200 (exit_code 328)\n"


def test_a_job_past_its_timeout_is_killed_and_fails() -> None:
    out = _capture("echo started; sleep 300", timeout=0.5)
    assert out.exit_code == -1
    assert out.stdout == "started\n"
    assert out.stderr.endswith("job timed out\n")


def test_a_spawn_failure_is_exit_minus_one() -> None:
    async def go() -> Outcome:
        return await capture(
            ["sh", "-c", "true"],
            env={},
            cwd=Path("/no/such/dir"),
            conf=Confinement([]),
            output_limit=4096,
            timeout=None,
            abort=asyncio.Event(),
        )

    out = asyncio.run(go())
    assert out.exit_code == -1 and out.stderr.startswith("spawn failed:")


# Deploy archives.


def make_zip(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = ((modes or {}).get(name, 0o644) | stat.S_IFREG) << 16
            zf.writestr(info, data)
    return buffer.getvalue()


def test_extract_unpacks_files_and_keeps_the_exec_bit(tmp_path: Path) -> None:
    archive = tmp_path / "app.zip"
    archive.write_bytes(
        make_zip({"start.sh": b"echo hi\n", "lib/a.txt": b"a"}, {"start.sh": 0o755})
    )
    out = tmp_path / "out"
    out.mkdir()
    extract(archive, out, MiB)
    assert (out / "lib" / "a.txt").read_bytes() == b"a"
    assert os.access(out / "start.sh", os.X_OK)


@pytest.mark.parametrize("name", ["../evil.sh", "/etc/evil", "a/../../evil", "..\\evil", "C:/x"])
def test_extract_refuses_paths_leaving_the_directory(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "app.zip"
    archive.write_bytes(make_zip({"ok.txt": b"fine", name: b"boom"}))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DeployError, match="unsafe path"):
        extract(archive, out, MiB)
    assert list(out.iterdir()) == []  # checked before anything is written
    assert not (tmp_path / "evil.sh").exists()


def test_extract_refuses_symlinks(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        info = zipfile.ZipInfo("link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    archive = tmp_path / "app.zip"
    archive.write_bytes(buffer.getvalue())
    with pytest.raises(DeployError, match="symlink"):
        extract(archive, tmp_path, MiB)


def test_extract_stops_a_zip_bomb(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big", b"\0" * (4 * MiB))
    archive = tmp_path / "app.zip"
    archive.write_bytes(buffer.getvalue())
    assert archive.stat().st_size < 64 * 1024
    with pytest.raises(DeployError, match="too many bytes"):
        extract(archive, tmp_path / "x", MiB)


def test_extract_refuses_what_is_not_a_zip(tmp_path: Path) -> None:
    archive = tmp_path / "app.zip"
    archive.write_bytes(b"<html>not found</html>")
    with pytest.raises(DeployError, match="extract failed"):
        extract(archive, tmp_path, MiB)


Handler = Callable[[httpx.Request], httpx.Response]


def _download(handler: Handler, dest: Path, max_bytes: int = MiB) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            await download(http, "http://store/app.zip", dest, max_bytes)

    asyncio.run(go())


def test_download_checks_the_status(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="download error: HTTP 404"):
        _download(lambda r: httpx.Response(404, text="no"), tmp_path / "a.zip")


def test_download_stops_at_the_size_cap(tmp_path: Path) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b"x" * 65536

    def endless(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks())  # no content-length

    with pytest.raises(DeployError, match="larger than"):
        _download(endless, tmp_path / "a.zip", max_bytes=200_000)
    declared = httpx.Response(200, content=b"x" * 300_000)
    with pytest.raises(DeployError, match="larger than"):
        _download(lambda r: declared, tmp_path / "b.zip", max_bytes=200_000)


def _executor(
    tmp_path: Path, handler: Handler, backend: Backend | None = None
) -> tuple[Executor, httpx.AsyncClient]:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    config = ExecConfig(
        work_dir=tmp_path / "work",
        backend=backend or RlimitBackend(),
        run_limits=Limits(512 * MiB, 1),
        service_limits=Limits(1024 * MiB, 2),
        output_limit=4096,
        timeout_secs=60,
        deploy_max_bytes=MiB,
    )
    return Executor(config, http), http


def _run(tmp_path: Path, job: AgentJob, handler: Handler) -> Outcome:
    async def go() -> Outcome:
        executor, http = _executor(tmp_path, handler)
        async with http:
            return await executor.run(job, None, asyncio.Event())

    return asyncio.run(go())


def test_a_deploy_job_downloads_unpacks_and_runs_start_sh(tmp_path: Path) -> None:
    app = make_zip({"start.sh": b'echo "deployed $GREETING from $(basename $PWD)"\n'})
    job = AgentJob(job_id="job-9", deploy_url="http://store/app.zip", env_vars={"GREETING": "hi"})
    out = _run(tmp_path, job, lambda r: httpx.Response(200, content=app))
    assert out.exit_code == 0, out.stderr
    assert out.stdout.startswith("deployed hi from job-job-9-")
    assert list((tmp_path / "work").iterdir()) == []  # the job's directory is removed


def test_a_deploy_without_start_script_fails(tmp_path: Path) -> None:
    app = make_zip({"README": b"nothing to run"})
    job = AgentJob(job_id="job-9", deploy_url="http://store/app.zip")
    out = _run(tmp_path, job, lambda r: httpx.Response(200, content=app))
    assert out == Outcome(-1, "", NO_START_SCRIPT)


def test_a_failed_download_fails_the_job(tmp_path: Path) -> None:
    job = AgentJob(job_id="job-9", deploy_url="http://store/app.zip")
    out = _run(tmp_path, job, lambda r: httpx.Response(500, text="boom"))
    assert out.exit_code == -1 and out.stderr.startswith("download error: HTTP 500")


def test_run_jobs_are_limited(tmp_path: Path) -> None:
    job = AgentJob(job_id="job-2", command='python3 -c "b = bytearray(1 << 30)"')
    out = _run(tmp_path, job, lambda r: httpx.Response(404))
    assert out.exit_code != 0 and "MemoryError" in out.stderr


def _service(tmp_path: Path, job: AgentJob, stop_once: Path | None) -> Outcome:
    """The service's outcome, run until it ends, or stopped (the agent stopping) once the file
    `stop_once` exists (it made it: what it printed before is written)."""

    async def stop_when_there(abort: asyncio.Event) -> None:
        while stop_once is not None and not stop_once.exists():
            await asyncio.sleep(0.02)
        abort.set()

    async def go() -> Outcome:
        executor, http = _executor(tmp_path, lambda r: httpx.Response(404))
        async with http:
            started = await executor.start_service(job, None)
            assert isinstance(started, Service)
            abort = asyncio.Event()
            if stop_once is not None:
                stopping = asyncio.create_task(stop_when_there(abort))
            outcome = await started.wait(abort)
            if stop_once is not None:
                await stopping
            return outcome

    return asyncio.run(go())


def test_a_service_that_exits_reports_its_code_and_log(tmp_path: Path) -> None:
    job = AgentJob(
        job_id="job-5", command="echo serving on $PORT; exit 4", job_type="service", port=8088
    )
    out = _service(tmp_path, job, None)
    assert out.exit_code == 4
    assert out.stdout == "serving on 8088\n"


def test_a_service_killed_by_a_signal_says_which(tmp_path: Path) -> None:
    job = AgentJob(job_id="job-8", command="echo up; kill -9 $$", job_type="service")
    out = _service(tmp_path, job, None)
    assert out == Outcome(137, "up\n", "signal: SIGKILL (exit_code 137)\n")


def test_a_service_is_stopped_when_the_agent_stops(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    command = f"echo up; touch {marker}; exec sleep 300"
    job = AgentJob(job_id="job-6", command=command, job_type="service")
    out = _service(tmp_path, job, marker)
    assert out.exit_code == -1
    assert out.stdout == "up\n" and "agent stopped" in out.stderr


def test_a_service_without_command_or_start_script_fails(tmp_path: Path) -> None:
    async def go() -> Service | Outcome:
        executor, http = _executor(tmp_path, lambda r: httpx.Response(404))
        async with http:
            return await executor.start_service(AgentJob(job_id="job-7", job_type="service"), None)

    assert asyncio.run(go()) == Outcome(-1, "", "no start script")


class Recording(Backend):
    """Confines nothing (cgroups may not be writable here); records each job's limits."""

    name = "recording"

    def __init__(self) -> None:
        self.given: list[tuple[str, Limits]] = []

    def confine(self, tag: str, limits: Limits) -> Confinement:
        self.given.append((tag, limits))
        return Confinement([])


@pytest.mark.parametrize(
    "job_type, cpus, memory_mb, limits",
    [
        ("", 0, 0, Limits(512 * MiB, 1)),  # asks nothing: AGENT_RUN_* as before
        ("", 0, 2048, Limits(2048 * MiB, 1)),
        ("", 2, 64, Limits(64 * MiB, 2)),
        ("service", 0, 0, Limits(1024 * MiB, 2)),  # AGENT_SERVICE_* as before
        ("service", 1, 0, Limits(1024 * MiB, 1)),
        ("service", 3, 300, Limits(300 * MiB, 3)),
    ],
)
def test_each_job_is_confined_to_what_it_asked(
    tmp_path: Path, job_type: str, cpus: int, memory_mb: int, limits: Limits
) -> None:
    backend = Recording()
    job = AgentJob(
        job_id="job-4", command="exit 0", job_type=job_type, cpus=cpus, memory_mb=memory_mb
    )

    async def go() -> Outcome:
        executor, http = _executor(tmp_path, lambda r: httpx.Response(404), backend)
        async with http:
            if job_type != "service":
                return await executor.run(job, None, asyncio.Event())
            started = await executor.start_service(job, None)
            assert isinstance(started, Service)
            return await started.wait(asyncio.Event())

    assert asyncio.run(go()).exit_code == 0
    assert backend.given == [("job-4", limits)]


def test_what_a_job_asked_is_really_its_limit(tmp_path: Path) -> None:
    command = "ulimit -v; grep Cpus_allowed_list /proc/self/status"
    job = AgentJob(job_id="job-8", command=command, cpus=2, memory_mb=64)
    out = _run(tmp_path, job, lambda r: httpx.Response(404))  # rlimits: work everywhere
    address_space, allowed = out.stdout.splitlines()
    assert int(address_space) * 1024 == 64 * MiB
    cores = sum(
        int(b) - int(a) + 1 if b else 1
        for a, _, b in (part.partition("-") for part in allowed.split()[-1].split(","))
    )
    assert cores == min(2, len(os.sched_getaffinity(0)))


def test_an_impossible_ask_fails_the_job_clearly(tmp_path: Path) -> None:
    """Only reachable when the node offers no memory figure (else it is refused first)."""
    job = AgentJob(job_id="job-8", command="echo ran", memory_mb=2**60)
    out = _run(tmp_path, job, lambda r: httpx.Response(404))
    assert (out.exit_code, out.stdout) == (126, "")
    assert out.stderr.startswith("agent: cannot apply resource limits")

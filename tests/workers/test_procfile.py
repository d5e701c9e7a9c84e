"""The Procfile (web, worker, dashboard) run by honcho, end to end: a job submitted to the web
process is published to SNS by the worker process, and rq-dashboard shows the worker queues
and a publish that failed for good."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from honcho import command as honcho_command

from scheduler.cli.main import build_parser
from scheduler.config import Settings
from scheduler.store.connection.blocking import sync_client
from scheduler.store.keys import Keys
from tests.fakes import FakeSNS, ending_number, eventually
from tests.processes import scheduler_env, wait_http
from tests.redis_server import free_port, sentinel_group
from workers import queues

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


def test_procfile_is_valid_and_its_programs_are_installed() -> None:
    check = subprocess.run(
        [str(BIN / "honcho"), "check"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stderr
    processes = procfile()
    assert {"web", "worker", "dashboard"} <= set(processes)
    for command in processes.values():
        words = shlex.split(command)
        program = next(w for w in words if "=" not in w)  # after the variable assignments
        assert (BIN / program).exists(), f"{program} is not installed in {BIN}"
    # rq-dashboard imports six without declaring it; the dashboard extra installs it.
    probe = [sys.executable, "-c", "import rq_dashboard.web"]
    assert subprocess.run(probe, capture_output=True, timeout=60).returncode == 0


@contextlib.contextmanager
def honcho(env: dict[str, str], *names: str, log: Path) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            # The repository's .env sets honcho's base port to 9001 (README), over any -p; a
            # test reads no .env and takes free ports.
            [str(BIN / "honcho"), "start", "--env", os.devnull, *names],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        print(log.read_text(errors="replace")[-4000:])


def test_honcho_runs_web_worker_and_dashboard_together(
    redis_url: str, prefix: str, tmp_path: Path, sns: FakeSNS
) -> None:
    run_procfile(redis_url, prefix, tmp_path, sns)


def test_the_procfile_runs_unchanged_on_sentinel(prefix: str, tmp_path: Path, sns: FakeSNS) -> None:
    # REDIS_URL=redis+sentinel://...: the API, the worker and rq-dashboard all find the primary.
    with sentinel_group(replicas=1) as group:
        run_procfile(group.url, prefix, tmp_path, sns)


def run_procfile(redis_url: str, prefix: str, tmp_path: Path, sns: FakeSNS) -> None:
    web, dashboard = free_port(), free_port()
    env = scheduler_env(
        redis_url,
        prefix,
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        HOST="127.0.0.1",
        PORT=str(web),
        DASHBOARD_PORT=str(dashboard),
        SNS_URL=sns.url,
        SCHEDULER_DB=str(tmp_path / "snapshot.db"),
        OUTBOX_FLUSH_SECS="0.2",
        HTTP_TIMEOUT_SECS="1",
        SNS_RETRY_MAX="1",
        SNS_RETRY_BASE_SECS="1",
        REGISTRY_URL="",
    )
    settings = Settings.from_env(env)  # the environment is a valid configuration
    rclient = sync_client(settings)
    with honcho(env, "web", "worker", "dashboard", log=tmp_path / "honcho.log"):
        api = f"http://127.0.0.1:{web}"
        wait_http(f"{api}/health")
        node = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
        registered = httpx.post(f"{api}/nodes/register", json=node)
        assert registered.status_code == 201
        # The web line runs the agent calls in token mode: the node reports with its token.
        token = {"Authorization": f"Bearer {registered.json()['token']}"}

        def finish() -> str:
            job_id: str = httpx.post(f"{api}/jobs", json={"command": "x"}).json()["job_id"]
            for status in ("running", "done"):
                body = {"status": status, "exit_code": 0}
                answer = httpx.patch(f"{api}/jobs/{job_id}", json=body, headers=token)
                assert answer.status_code == 200
            return job_id

        delivered = finish()
        eventually(lambda: sns.events(), timeout=30)
        assert sns.events() == [{"job_id": delivered, "status": "done"}]

        sns.failing = 500  # the next event fails its try and its one retry
        lost = finish()
        # Read by name: this process's rq runs another prefix (workers/rq_prefix.py).
        failed = Keys(prefix).rq_key("failed", Keys(prefix).rq_queue(queues.EVENTS))
        eventually(lambda: rclient.zrange(failed, 0, -1), timeout=30)
        number = ending_number(rclient, Keys(prefix), lost)
        assert rclient.zrange(failed, 0, -1) == [Keys(prefix).rq_job_id("event", number).encode()]
        assert lost not in [e["job_id"] for e in sns.events()]

        board = f"http://127.0.0.1:{dashboard}"
        wait_http(f"{board}/")
        listed = httpx.get(f"{board}/0/data/queues.json", timeout=10).json()["queues"]
        by_name = {q["name"]: q for q in listed}
        assert by_name[f"{prefix}.events"]["failed_job_registry_count"] == 1
        assert f"{prefix}.periodic" in by_name


def test_worker_command_line() -> None:
    parser = build_parser()
    args = parser.parse_args(["worker"])
    assert (args.queues, args.burst) == (["periodic", "events"], False)
    assert parser.parse_args(["worker", "--queues", "events", "--burst"]).queues == ["events"]
    for bad in ("", "periodic,bogus"):
        with pytest.raises(SystemExit):
            parser.parse_args(["worker", "--queues", bad])
    shown = subprocess.run(
        [sys.executable, "-m", "scheduler", "worker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0 and "--queues" in shown.stdout


def test_plain_honcho_start_puts_the_api_where_the_agent_looks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`honcho start` as README says: web.1 gets honcho's base port, which the repository's
    .env sets to the port the agent and the CLI use by default (honcho alone would say 5000)."""
    monkeypatch.delenv("PORT", raising=False)
    args = honcho_command.parser.parse_args(["--app-root", str(ROOT), "start"])
    base = int(honcho_command.map_from(args)["port"])
    assert base == urlsplit(Settings().scheduler_url).port == 9001
    web = procfile()["web"]
    assert "--port ${PORT:-9001}" in web

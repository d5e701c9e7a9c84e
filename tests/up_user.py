"""A user of `scheduler up`, for the day-in-the-life test (tests/test_day_in_the_life.py).

`Up` starts `scheduler up` as README's quickstart does (`./dev up` runs the venv's `scheduler
up`), in the test's own folder (its data dir, and XDG_STATE_HOME, where the session's key is
kept), with every period that matters shortened (ACCELERATED), and reads its banner, its log
and the Redis its children use. `User` is the person at the keyboard, with README's three ways
in: the CLI as a subprocess, the HTTP API with the session's key, the web UI through its
login form. Each call says what it expects: a call the user got right is never refused (no
401, 403, 429 or 5xx: the message then says how many wrong keys Redis counts against the
user's address), and one the user got wrong is the 4xx (or the CLI's usage error) it names.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import httpx
import redis

from scheduler.config import Settings
from scheduler.store.keys import Keys
from tests.fakes import eventually
from tests.redis_server import free_port

T = TypeVar("T")

# Every period that matters, at a tenth of its default (docs/CONFIGURATION.md), so that a
# minute of the test is ten minutes of a deployment left at the defaults.
ACCELERATED = {
    "AGENT_POLL_WAIT_SECS": "2",  # 20: an idle agent polls (GET /jobs, GET /instances) every 2 s
    "AGENT_POLL_SECS": "0.3",  # 3
    "AGENT_HEARTBEAT_SECS": "1",  # 10
    "NODE_TTL_SECS": "3",  # 30 (a node is lost after 4 times this)
    "AUTH_FAILURES_WINDOW_SECS": "30",  # 300
    # 10: lower still, so that any traffic of the product's own counted as a wrong key
    # locks the user out within seconds.
    "AUTH_FAILURES_MAX": "2",
    # 43200: lower still, so that a login ends within the test and the user logs in again.
    "UI_SESSION_SECS": "20",
    "PROMOTE_INTERVAL_SECS": "0.1",  # 1
    "SCHEDULE_TICK_SECS": "0.1",  # 1
    "SCHEDULE_GRACE_SECS": "6",  # 60
    "OUTBOX_FLUSH_SECS": "0.1",  # 1
    "SWEEP_INTERVAL_SECS": "1",  # 10
    "SNAPSHOT_INTERVAL_SECS": "0.5",  # 5
    "METRICS_FLUSH_SECS": "0.1",  # 1
    "CANCEL_GRACE_SECS": "6",  # 60
    "HEAD_TIMEOUT_SECS": "1",  # 10
    "AGENT_GRACE_SECS": "3",  # 30
    "WORKER_MAINTENANCE_SECS": "6",  # 60
    "WORKER_ABANDON_GRACE_SECS": "6",  # 60
    "WORKER_LOCK_SECS": "1",  # 5 (1 is its least)
}
BANNER = "scheduler is up at "
ADDRESS = "127.0.0.1"  # where the user, and `up`'s agent, call from
REFUSED = (401, 403, 429)
ERROR_LINE = re.compile(r"^\S+ \S+ ERROR ", re.MULTILINE)  # main.LOG_FORMAT's level
STEP_SECS = 60.0  # the longest any one step may take on a loaded machine


def user_env(folder: Path) -> dict[str, str]:
    """This user's environment: none of the scheduler's settings from the test's own (so the
    defaults hold unless the test sets one), the session's key file in the test's folder."""
    names = {f.metadata["env"] for f in fields(Settings)}
    env = {k: v for k, v in os.environ.items() if k not in names and k != "RQ_KEY_PREFIX"}
    env.update(XDG_STATE_HOME=str(folder / "state"), PYTHONUNBUFFERED="1")
    return env


def wait_for(what: str, check: Callable[[], T], timeout: float = STEP_SECS) -> T:
    """`check()`'s first true answer (tests/fakes.py eventually), failing with `what`."""
    try:
        return eventually(check, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{what}: {exc}") from None


class Up:
    """`scheduler up` in `folder` (its working directory, so its data is `folder/data` as
    `./dev up`'s is `./data`), its output (every child's log too) in `folder/up.log`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = folder / "up.log"
        (folder / "state").mkdir(mode=0o700)
        self.env = user_env(folder) | ACCELERATED
        # Its agent's job folders in the test's, apart from other tests' agents.
        self.env["AGENT_WORK_DIR"] = str(folder / "agent")
        for _ in range(3):  # a free port is free when drawn: another process may take it
            self.port = free_port()
            self.proc = self._start()
            self.url = self._wait_banner()
            self.up_at = time.monotonic()
            if self.url:
                return
        raise AssertionError(f"no free port for `scheduler up`:\n{self.text()}")

    def _start(self) -> subprocess.Popen[bytes]:
        with self.log.open("wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "scheduler", "up", "--port", str(self.port)],
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def _wait_banner(self, timeout: float = 120.0) -> str:
        """The URL the banner gives; "" when the port was taken meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.text().splitlines():
                if line.startswith(BANNER):
                    return line.removeprefix(BANNER).strip()
            if self.proc.poll() is not None:
                if f"port {self.port} is in use" in self.text():
                    return ""
                raise AssertionError(
                    f"`scheduler up` exited {self.proc.returncode}:\n{self.text()}"
                )
            time.sleep(0.1)
        raise AssertionError(f"no banner within {timeout:g} s:\n{self.text()}")

    def child_env(self, role: bytes) -> dict[str, str]:
        """The environment `up` gave its child whose command line holds `role` (the way it
        hands its children the Redis it started, password included)."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid and role in cmdline:
                pairs = (item.partition(b"=") for item in environ.split(b"\0") if item)
                return {k.decode(): v.decode() for k, _, v in pairs}
        raise AssertionError(f"no `{role.decode()}` child of `scheduler up`")

    def problems(self) -> list[str]:
        """The log's ERROR lines and tracebacks."""
        text = self.text()
        found = [line for line in text.splitlines() if ERROR_LINE.match(line)]
        return found + (["a traceback"] if "Traceback" in text else [])

    def interrupt(self, timeout: float) -> int:
        """A user's Ctrl-C; `up`'s exit status."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Said:
    """A CLI call's exit status and output."""

    argv: tuple[str, ...]
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"`scheduler {' '.join(self.argv)}` exited {self.code}\n{self.out}{self.err}"


class User:
    """The operator at the keyboard of the machine `up` runs on."""

    def __init__(self, up: Up) -> None:
        self.url = up.url
        # The banner's `try` line: SCHEDULER_URL set to this URL; the CLI finds the key.
        self.env = user_env(up.folder) | {"SCHEDULER_URL": up.url}
        # The banner's lines come after its first ("scheduler is up at"): wait for the key's.
        key_line = wait_for(
            "the banner's key line",
            lambda: re.search(r"^  key: in (\S+) ", up.text(), re.MULTILINE),
        )
        self.key = Path(key_line[1]).read_text().strip()
        self.api = httpx.Client(
            base_url=up.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=STEP_SECS
        )
        self.browser = httpx.Client(base_url=up.url, timeout=STEP_SECS)  # keeps the cookie
        child = up.child_env(b"serve")
        self.redis = redis.Redis.from_url(child["REDIS_URL"], socket_timeout=10)
        prefix = child.get("REDIS_PREFIX") or Settings().redis_prefix
        self.failures_key = Keys(prefix).auth_failures(ADDRESS)
        # Refusals the user made on purpose (a reader's key submitting, to see it refused):
        # `code method route` -> how many; `refusals` leaves them out.
        self.meant: dict[str, int] = {}

    def close(self) -> None:
        self.api.close()
        self.browser.close()
        self.redis.close()

    # What the product counts against the user.

    def wrong_keys(self) -> int:
        """Wrong keys Redis counts from the user's address in the window (scripts/access.py's
        COUNT_FAILURE keeps a counter with the window as its TTL)."""
        return int(self.redis.get(self.failures_key) or 0)

    def note(self) -> str:
        return (
            f"\n(Redis counts {self.wrong_keys()} wrong keys from {ADDRESS} in the window; "
            "the user sent none)"
        )

    def counts_nothing(self, after: str) -> None:
        assert self.wrong_keys() == 0, (
            f"after {after}, Redis counts {self.wrong_keys()} wrong keys from {ADDRESS} "
            f"(AUTH_FAILURES_MAX is {ACCELERATED['AUTH_FAILURES_MAX']}): the user sent none, "
            "so the product's own traffic counts as guesses and will lock its operator out"
        )

    def idle(self, secs: float, why: str) -> None:
        """The user away from the keyboard while the agent polls; then a look at the jobs."""
        time.sleep(secs)
        self.cli("list", "--newest", "--limit", "5")
        self.counts_nothing(f"{secs:g} s idle ({why})")

    # The command-line client.

    def run(self, *argv: str, key: str = "") -> Said:
        """The CLI, with the session's key, or `key` (a named one) as TINYAWS_API_KEY."""
        env = self.env | {"TINYAWS_API_KEY": key} if key else self.env
        done = subprocess.run(
            [sys.executable, "-m", "scheduler", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_SECS,
        )
        return Said(argv, done.returncode, done.stdout, done.stderr)

    def python(self, code: str) -> Said:
        """A Python program of the user's (the venv's python, as README's example says), with
        the user's environment: scheduler.client finds the session's key as the CLI does."""
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STEP_SECS,
        )
        said = Said(("python",), done.returncode, done.stdout, done.stderr)
        assert said.code == 0, f"{said}{self.note()}"
        return said

    def cli(self, *argv: str, code: int = 0, key: str = "") -> Said:
        """A right call: exits `code` (the job's own exit code for `submit --wait`)."""
        said = self.run(*argv, key=key)
        assert said.code == code, f"{said}(a right call, due to exit {code}){self.note()}"
        return said

    def cli_forbidden(self, *argv: str, key: str, route: str, needs: str) -> Said:
        """A named key's call its role does not allow, on purpose: 403 naming the role it
        needs, and counted as no wrong key."""
        said = self.run(*argv, key=key)
        assert said.code == 1 and f"needs {needs} or above" in said.err, str(said)
        assert "forbidden: the key " in said.err and said.err.rstrip().endswith("(403)"), str(said)
        self.meant[route] = self.meant.get(route, 0) + 1
        self.counts_nothing(f"a call its role does not allow ({' '.join(argv)})")
        return said

    def cli_wrong(self, *argv: str, code: int, says: str) -> Said:
        """A call the user got wrong: exits `code` saying `says`, and is no refusal."""
        said = self.run(*argv)
        printed = said.out + said.err
        assert said.code == code and says in printed, f"{said}(due: exit {code}, {says!r})"
        assert not re.search(r"\b(401|403|429|5\d\d)\b", printed), f"{said}{self.note()}"
        return said

    # The HTTP API, with the key.

    def call(self, method: str, path: str, status: int = 200, **kwargs: Any) -> httpx.Response:
        """A call answered `status`: a right one, or a wrong one's 4xx."""
        response = self.api.request(method, path, **kwargs)
        assert response.status_code == status, (
            f"{method} {path}: {response.status_code} {response.text[:300]!r}, "
            f"due {status}{self.note()}"
        )
        return response

    def job(self, job_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.call("GET", f"/jobs/{job_id}").json()
        return found

    def ended(self, job_id: str) -> dict[str, Any]:
        """The job once done or failed."""
        return self.reaches(job_id, ("done", "failed"))

    def reaches(self, job_id: str, statuses: tuple[str, ...]) -> dict[str, Any]:
        """The job once its status is one of `statuses` (long-polls on each change)."""
        seen = [self.job(job_id)]

        def arrived() -> dict[str, Any] | None:
            if seen[-1]["status"] in statuses:
                return seen[-1]
            params = {"wait": "5", "status_not": seen[-1]["status"]}
            seen.append(self.call("GET", f"/jobs/{job_id}", params=params).json())
            return None

        try:
            found: dict[str, Any] = wait_for(f"{job_id} {' or '.join(statuses)}", arrived)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its statuses: {[j['status'] for j in seen]}") from None
        return found

    # The web UI, as a browser does it: cookies kept, redirects seen.

    def page(self, path: str, status: int = 200, says: str = "") -> str:
        response = self.browser.get(path)
        assert response.status_code == status and says in response.text, (
            f"GET {path}: {response.status_code}, due {status} saying {says!r}:\n"
            f"{response.text[:500]}{self.note()}"
        )
        return response.text

    def log_in(self) -> None:
        self.page("/ui/login", says='name="key"')
        response = self.browser.post("/ui/login", data={"key": self.key})
        assert (response.status_code, response.headers.get("location")) == (303, "/ui"), (
            f"POST /ui/login with the right key: {response.status_code} "
            f"{response.text[:300]!r}{self.note()}"
        )

    @staticmethod
    def token(page: str) -> str:
        """The CSRF token of a page's forms."""
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found, f"no form on the page:\n{page[-1000:]}"
        return found[1]

    def press(self, page: str, action: str, status: int = 303) -> httpx.Response:
        """A button of `page` (a POST form with the page's CSRF token) to `action`."""
        response = self.browser.post(action, data={"csrf": self.token(self.page(page))})
        assert response.status_code == status, (
            f"POST {action} from {page}: {response.status_code} {response.text[:300]!r}, "
            f"due {status}{self.note()}"
        )
        return response

    def refusals(self) -> list[str]:
        """Every refused or failed answer the API gave anyone (its request counters in
        /metrics, every process's): `code method route count`."""
        text = self.call("GET", "/metrics").text
        found = re.findall(
            r'^scheduler_http_requests_total\{code="(\d+)",method="(\w+)",route="([^"]*)"\} (\S+)',
            text,
            re.MULTILINE,
        )
        return [
            f"{code} {method} {route} x{left:g}"
            for code, method, route, count in found
            if (int(code) in REFUSED or int(code) >= 500)
            and (left := float(count) - self.meant.get(f"{code} {method} {route}", 0))
        ]

"""`scheduler up` keeps its data and its Redis to the user who runs it (issue 36, finding 2):
another local user read every job's env_vars in the world-readable append-only file and
snapshot, and rewrote a delayed job's command through the embedded Redis, which took no
password; the agent then ran it as the operator. (The test's job waits for another rather
than for a delay: the same record in Redis, held until the test lets it run.)

The data dir sits in a fresh folder of /tmp that everyone may traverse (pytest's tmp_path is
under a folder only its user may enter, which would hide the bug), and the other user is
`nobody`, for real (the suite runs as root in CI)."""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from scheduler.cli.deployment import url_file
from scheduler.cli.embedded import EmbeddedRedis, embedded_redis
from scheduler.cli.private_dir import private_data_dir, private_snapshot
from scheduler.cli.up import _banner, _external
from tests.cli import test_up
from tests.cli.test_up import Up, _env, _up_command, _wait_for
from tests.redis_server import free_port

NOBODY = 65534
SECRET = "DBPASS-value-7f3a91c2"
ups = test_up.ups  # the fixture that kills what a failed test left running


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A new folder of /tmp that any user may enter and list, as a home or /srv often is."""
    base = Path(tempfile.mkdtemp(prefix="scheduler-up-private-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _redis_address(data: Path) -> tuple[int, str]:
    """The embedded Redis's TCP port (0: none) and unix socket ("" : none), from its config,
    as another user learns them from `ss -lx` or /proc/net."""
    conf = (data / "redis" / "valkey.conf").read_text()
    port = re.search(r"^port (\d+)$", conf, re.M)
    sock = re.search(r'^unixsocket "?([^"\n]+)"?$', conf, re.M)
    return (int(port.group(1)) if port else 6379), (sock.group(1) if sock else "")


def _redis_url(up: Up, data: Path) -> str:
    """The URL `up` gave its children (REDIS_URL, password included), from the file of the
    data dir the banner names."""
    named = re.search(r"snapshot --data-dir (\S+)", up.log.read_text())
    assert named, up.log.read_text()
    return url_file(Path(named.group(1))).read_text().strip()


def _holds(path: Path, text: str) -> list[int]:
    """[1] once the file holds `text` (for _wait_for)."""
    try:
        return [1] if text.encode() in path.read_bytes() else []
    except FileNotFoundError:
        return []


def _key(state: Path, up: Up) -> str:
    return (state / "tinyaws-scheduler" / f"127.0.0.1-{up.port}" / "api-key").read_text()


def _job(up: Up, key: str, job_id: str) -> dict[str, object]:
    got = httpx.get(f"{up.url}/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"})
    assert got.status_code == 200, got.text
    job: dict[str, object] = got.json()
    return job


def _loose_deployment(data: Path) -> None:
    """A data dir as an earlier version left it: folders 0755, files 0644."""
    (data / "redis" / "appendonlydir").mkdir(parents=True)
    for folder in (data, data / "redis", data / "redis" / "appendonlydir"):
        folder.chmod(0o755)
    (data / "scheduler.db").touch()
    (data / "redis" / "valkey.log").write_text("an earlier run's log\n")
    for file in (data / "scheduler.db", data / "redis" / "valkey.log"):
        file.chmod(0o644)


def _modes(data: Path) -> dict[str, str]:
    """Every folder and file under `data` (itself included) whose mode is not owner-only:
    0700 folders, 0600 files (the socket: no bit for others)."""
    loose = {}
    for path in [data, *data.rglob("*")]:
        info = path.lstat()
        want = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        mode = stat.S_IMODE(info.st_mode)
        bad = mode & 0o077 if stat.S_ISSOCK(info.st_mode) else mode != want
        if bad:
            loose[str(path.relative_to(data))] = oct(mode)
    return loose


# The attack on Redis, as `nobody` runs it with redis-cli at each address Redis has
# ($1: `-p PORT` or `-s SOCKET`): read the delayed job's records, and where the command is
# found, set the record to one with another command. "OK" would be a rewritten job.
REWRITE = r"""
for key in "$2" "$2:spec"; do
  record=$(redis-cli $1 --raw GET "$key" 2>&1)
  case "$record" in
    *"$3"*) redis-cli $1 SET "$key" "$(printf '%s' "$record" | sed "s/$3/$4/")" 2>&1 ;;
    *) printf '%s\n' "$record" ;;
  esac
done
"""


def _as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
        env={"PATH": os.environ["PATH"], "LC_ALL": "C"},
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=60,
    )


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root, to run the attack as another user (nobody)"
)
def test_up_keeps_its_data_redis_and_key_to_its_own_user_against_another(
    open_base: Path, ups: list[Up]
) -> None:
    """One `up` over a data dir an earlier version left readable by all (and its snapshot
    elsewhere, SCHEDULER_DB, likewise): every file and folder is made owner-only, each
    tightening logged; Redis takes nothing without its password. Then the issue's attack,
    as `nobody`: grep the append-only file and the snapshot for a job's env var value, read
    the snapshot with sqlite3 and the session key file, and set the record of a job not run
    yet in Redis to another command. Each is refused, and the job runs the command it was
    given."""
    data, state = open_base / "data", open_base / "state"
    _loose_deployment(data)
    db = open_base / "elsewhere" / "scheduler.db"
    db.parent.mkdir(mode=0o755)
    db.touch()
    db.chmod(0o644)
    # A snapshot every 0.5 s: the test waits for the first to hold the job (5 s by default).
    up = Up(
        data,
        open_base / "up.log",
        XDG_STATE_HOME=str(state),
        SCHEDULER_DB=str(db),
        SNAPSHOT_INTERVAL_SECS="0.5",
    )
    ups.append(up)
    key = _key(state, up)
    done = up.cli("submit", "echo hi", "--env", f"DBPASS={SECRET}", "--wait")
    assert done.returncode == 0, done.stderr
    aof = data / "redis" / "appendonlydir"
    # The worker's snapshot (SNAPSHOT_INTERVAL_SECS) and Redis's append-only file hold it.
    _wait_for(lambda: _holds(db, SECRET))
    _wait_for(lambda: [1] if any(_holds(f, SECRET) for f in aof.iterdir()) else [])
    # The job attacked waits for a gate job that runs until the test lets it end: it has not
    # run when the attack comes however long that takes (a job delayed 20 s made the test
    # wait out the rest of the 20 s), and runs as soon as the gate ends.
    gate_file = open_base / "attack-over"
    gate = up.cli("submit", f"until [ -e {gate_file} ]; do sleep 0.1; done")
    assert gate.returncode == 0, gate.stderr
    original, forged = "echo original-command", "echo FORGED-by-nobody"
    held = up.cli("submit", original, "--after", gate.stdout.split()[1])
    assert held.returncode == 0, held.stderr
    job_id = held.stdout.split()[1]

    files = f"{aof}/*.aof {db}"
    grep = _as_nobody(["sh", "-c", f"grep -a {SECRET} {files}"])
    assert SECRET not in grep.stdout and grep.returncode == 2, grep
    assert "Permission denied" in grep.stderr, grep.stderr
    if shutil.which("sqlite3"):
        dump = _as_nobody(["sqlite3", "-readonly", str(db), ".dump"])
        assert SECRET not in dump.stdout and "unable to open database" in dump.stderr, dump
    key_file = state / "tinyaws-scheduler" / f"127.0.0.1-{up.port}" / "api-key"
    read_key = _as_nobody(["cat", str(key_file)])
    assert key not in read_key.stdout and "Permission denied" in read_key.stderr, read_key
    port, sock = _redis_address(data)
    assert shutil.which("redis-cli"), "redis-cli (Debian's redis-tools) runs the attack"
    for where in ([f"-p {port}"] if port else []) + ([f"-s {sock}"] if sock else []):
        job_key = f"{{sched}}:job:{job_id}"
        said = _as_nobody(["sh", "-c", REWRITE, "sh", where, job_key, original, forged]).stdout
        assert "OK" not in said and original not in said, (where, said)
        assert "NOAUTH" in said or "Permission denied" in said, (where, said)
    assert _job(up, key, job_id)["status"] == "waiting"  # the attack came before it ran

    # Meanwhile, as its owner sees it: everything owner-only, each tightening said.
    assert _modes(data) == {}
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    logged = up.log.read_text()
    for tightened in ("scheduler.db (0644)", "redis (0755)", "redis/valkey.log (0644)"):
        assert tightened in logged, logged
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert key not in logged
    # Redis takes nothing without its password: none, or a wrong one.
    url = _redis_url(up, data)
    password = url.split("@")[0].rsplit(":", 1)[1]
    assert len(password) >= 64 and password not in logged  # 256 bits, never printed
    where_ = {"unix_socket_path": sock} if sock else {"port": port}
    for given in (None, "wrong"):
        client = redis.Redis(**where_, password=given, socket_timeout=5)
        with pytest.raises(redis.AuthenticationError):
            client.set("{sched}:job:job-1", "x")
        client.close()
    with redis.Redis.from_url(url) as client:
        assert client.ping()

    gate_file.touch()
    _wait_for(lambda: [1] if _job(up, key, job_id)["status"] == "done" else [], timeout=120)
    ran = _job(up, key, job_id)
    assert ran["command"] == original and ran["stdout"] == "original-command\n", ran
    assert up.interrupt() == 0, up.log.read_text()


def _refused_up(data: Path, port: int = 0, **env: str) -> subprocess.CompletedProcess[str]:
    """`up` that must stop at start: its exit and what it said."""
    return subprocess.run(
        _up_command(port or free_port(), data),
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("open_folder", ["tinyaws-scheduler", "tinyaws-scheduler/{host}"])
def test_up_refuses_to_run_without_a_key_it_cannot_keep_privately(
    open_base: Path, open_folder: str
) -> None:
    """A state folder another user can write (its own, or the one above it): `up` ran with
    no key at all, any local user submitting commands its agent ran as the operator."""
    state = open_base / "state"
    port = free_port()
    folder = state / open_folder.format(host=f"127.0.0.1-{port}")
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    result = _refused_up(open_base / "data", port, XDG_STATE_HOME=str(state))
    assert result.returncode == 1, result
    said = result.stderr
    assert said.startswith("scheduler up: cannot keep the session's key where only this user")
    assert f"{folder} must be a directory of this user, not writable by others" in said
    assert "Set TINYAWS_API_KEY" in said and "Traceback" not in said
    assert not (open_base / "data" / "redis").exists()  # refused before Redis started


def test_up_refuses_a_data_dir_another_user_owns(open_base: Path) -> None:
    """Its owner could read the append-only file or plant a valkey.conf of their own."""
    data = open_base / "data"
    if os.geteuid() == 0:
        data.mkdir()
        os.chown(data, NOBODY, NOBODY)
    else:  # any folder of root's is another user's
        data = Path("/")
    result = _refused_up(data)
    assert result.returncode == 1, result
    owner = "nobody (uid 65534)" if os.geteuid() == 0 else "root (uid 0)"
    assert f"scheduler up: cannot keep its data to this user: {data} belongs to {owner}" in (
        result.stderr
    )
    assert "--data-dir of your own" in result.stderr and "Traceback" not in result.stderr
    assert list(data.iterdir()) == [] or data == Path("/")  # nothing made there


def test_a_data_dir_is_closed_to_others_keeping_its_owners_bits_and_leaving_links(
    tmp_path: Path,
) -> None:
    """An earlier version's 0755/0644 data, reached through a link to the folder: closed to
    group and others, the owner's bits as they were (a script stays runnable, a read-only
    file read-only); a link inside is not followed out of the data dir."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not up's")
    outside.chmod(0o644)
    real = tmp_path / "real"
    (real / "redis").mkdir(parents=True)
    real.chmod(0o755)
    files = {"run.sh": 0o755, "readonly": 0o444, "redis/appendonly.aof": 0o644}
    for name, mode in files.items():
        (real / name).write_text("x")
        (real / name).chmod(mode)
    (real / "link").symlink_to(outside)
    (tmp_path / "data").symlink_to(real)

    private_data_dir(tmp_path / "data")

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(real) == 0o700 and mode(real / "redis") == 0o700
    assert [mode(real / name) for name in files] == [0o700, 0o400, 0o600]
    assert mode(outside) == 0o644


def test_a_snapshot_file_outside_the_data_dir_is_made_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "elsewhere" / "scheduler.db"
    db.parent.mkdir()
    for path in (db, Path(f"{db}-wal")):
        path.write_bytes(b"")
        path.chmod(0o644)
    private_snapshot(str(db))
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(f"{db}-wal").stat().st_mode) == 0o600
    private_snapshot(":memory:")  # no file: nothing to do


def test_a_data_dir_too_deep_for_a_socket_puts_it_in_a_private_temporary_folder(
    tmp_path: Path,
) -> None:
    """A unix socket's path has at most 107 bytes: a deep data dir's would not bind."""
    data = tmp_path / ("d" * 60) / ("e" * 60)
    data.mkdir(parents=True)
    with embedded_redis(data) as server:
        sock = Path(server.url.split("@", 1)[1].split("?")[0])
        assert sock.parent != data / "redis" and sock.is_socket()
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
        assert server.url_file.read_text().strip() == server.url
    assert not sock.parent.exists()  # removed at stop


def test_the_banner_never_shows_a_redis_password() -> None:
    lines = [_external("redis://:s3cret@redis.example:6379/0")]
    server = EmbeddedRedis(
        "unix://:s3cret@/d/redis/valkey.sock?db=0", [], Path("/d/redis"), Path("/d/redis/url")
    )
    lines += server.hint("/d/scheduler.db")
    out = io.StringIO()
    _banner(out, "http://127.0.0.1:9001", lines, None)
    shown = out.getvalue()
    assert "s3cret" not in shown
    assert "  redis: redis://:***@redis.example:6379/0 (REDIS_URL)" in shown
    assert "  snapshot or restore by hand: ./dev snapshot --data-dir /d\n" in shown
    elsewhere = server.hint("/elsewhere/s.db")[1]
    assert elsewhere.endswith(": SCHEDULER_DB=/elsewhere/s.db ./dev snapshot --data-dir /d")

"""`scheduler up`'s data kept to the user who runs it (issue 36): the append-only file and the
snapshot hold every job's env_vars, and valkey.conf the embedded Redis's password. `up` runs
with umask 077, so whatever it and its children create is 0600 / 0700; this module makes the
data dir so and tightens what an earlier version left readable by others (0644 files, 0755
folders), logging each, and refuses a data dir or file that another user owns: its owner
could read or replace what `up` keeps there."""

from __future__ import annotations

import logging
import os
import pwd
import stat
from pathlib import Path

log = logging.getLogger("scheduler.up")

UMASK = 0o077  # nothing `up` or its children create is anyone else's to read


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _tighten(path: Path, root: Path, tightened: list[str]) -> None:
    """`path` closed to group and others, its owner's bits kept (a script keeps its x: `up`
    may be pointed at a folder holding more than its own files); PermissionError if it is
    another user's. A symbolic link is left as it is: nothing follows it here."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return
    if info.st_uid != os.geteuid():
        raise PermissionError(
            f"{path} belongs to {_owner(info.st_uid)}, not to the user running `up` "
            f"({_owner(os.geteuid())}): whoever owns it could read or change what `up` keeps "
            "there. Use a --data-dir of your own, or give it to this user (chown -R)"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        os.chmod(path, mode & 0o700, follow_symlinks=False)
        name = "." if path == root else str(path.relative_to(root))
        tightened.append(f"{name} ({mode:04o})")


def private_data_dir(data_dir: Path) -> None:
    """Make `data_dir` (absolute) if need be, and it and everything in it owner-only.
    OSError when it cannot (another user's, a parent folder this user may not write). A
    data dir reached through a symbolic link is its target's folder: that is what is closed."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data_dir = data_dir.resolve()
    tightened: list[str] = []
    _tighten(data_dir, data_dir, tightened)
    for folder, dirs, files in os.walk(data_dir):
        for name in (*dirs, *files):
            _tighten(Path(folder) / name, data_dir, tightened)
    if tightened:
        log.warning(
            "made readable by this user only (were open to others) in %s: %s",
            data_dir,
            ", ".join(tightened),
        )


def private_snapshot(db: str) -> None:
    """SCHEDULER_DB outside the data dir, and SQLite's -wal and -shm beside it, owner-only
    when they exist (new ones are, by the umask)."""
    if db in ("", ":memory:"):
        return
    for path in (Path(db), Path(f"{db}-wal"), Path(f"{db}-shm")):
        tightened: list[str] = []
        try:
            _tighten(path.absolute(), path.absolute().parent, tightened)
        except FileNotFoundError:
            continue
        if tightened:
            log.warning("made readable by this user only (was open to others): %s", path)


def write_private(path: Path, text: str) -> None:
    """`text` in `path`, 0600 whatever the umask or an older file's mode, never through a
    link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)
        file.write(text)

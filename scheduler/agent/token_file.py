"""Where the reference agent keeps its node token across restarts: a file only its own user
can read, in a directory only that user can write, never reached through a link.

The token is the node's credential (with AGENT_AUTH=token: its jobs, their env_vars, its
reports), so a file another local user planted or can read is not trusted: it is ignored, and
the agent registers again (with the key) for a fresh token.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path

log = logging.getLogger("scheduler.agent")


def default_path(work_dir: str, node_id: str) -> Path:
    """AGENT_WORK_DIR/<node>/node-token when the operator chose a work dir; else under the
    user's state directory, not the shared temporary one."""
    if work_dir:
        return Path(work_dir) / node_id / "node-token"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "tinyaws-agent" / node_id / "node-token"


def _private(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & 0o077


def safe_dir(directory: Path) -> None:
    """`directory`, made 0700 if missing; PermissionError unless it is a directory of this
    user that no one else may write (another user could swap what is in it)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.stat(directory, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise PermissionError(
            f"{directory} must be a directory of this user, not writable by others"
        )


def load(path: Path) -> str:
    """The kept token, or "" when there is none that can be trusted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd) as file:
        if not _private(os.fstat(fd)):
            log.warning(
                "ignoring %s: it must belong to this user and be readable by no one else", path
            )
            return ""
        return file.read().strip()


def save(path: Path, token: str) -> None:
    """Replace the kept token at once (a new file renamed over the old one); "" removes it.
    Raises OSError when it cannot be kept safely."""
    safe_dir(path.parent)
    if not token:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(token)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise

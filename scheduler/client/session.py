"""The key `scheduler up` makes for its session when TINYAWS_API_KEY is unset (README,
Security): without one, any local user could submit commands that its agent runs as the
operator. It is kept where only the operator's user can read it, named by the API's address,
and the command-line client sends it when TINYAWS_API_KEY is unset and SCHEDULER_URL is that
address: `./dev submit 'echo hello' --wait` works as before, nobody types the key. The web
UI's login asks for it: the banner says where it is.

The file is kept as the agent keeps its node token (agent/token_file.py: 0600, in a 0700
directory of this user, never through a link; a file another user could have written or read
is ignored), and the tinyaws-scheduler folder above that directory must be this user's and
closed to other writers too (another user who owned it could swap the directory). It is
removed when `up` stops; a new session makes a new key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from pathlib import Path

from scheduler.agent import token_file
from scheduler.config import Settings, up_key


def key_path(url: str) -> Path | None:
    """Where the session key of the API at `url` is kept, or None for a URL with no host.
    The host is taken as written: `localhost`, `::1` and `127.0.0.1` are three addresses
    (127.0.0.1:P and [::1]:P are two sockets, and another local user may listen on the one
    `up` did not bind: the key is sent only to the address `up` gave)."""
    where = up_key.address(url)
    return up_key.state_home() / up_key.relative(*where) if where else None


def create(url: str) -> tuple[str, Path]:
    """A new key for the session of the API at `url`, kept for the client: (key, file).
    Raises OSError when it cannot be kept safely."""
    path = key_path(url)
    if path is None:
        raise OSError(f"no host in {url}")
    key = secrets.token_urlsafe(32)
    token_file.safe_dir(path.parent.parent)
    token_file.save(path, key)
    return key, path


def remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            token_file.save(path, "")


def with_session_key(settings: Settings, url: str) -> Settings:
    """`settings` with the key of the `up` session at `url` when TINYAWS_API_KEY is unset
    and one is kept there."""
    if settings.api_key:
        return settings
    path = key_path(url)
    key = token_file.load(path) if path is not None else ""
    return dataclasses.replace(settings, api_key=key) if key else settings

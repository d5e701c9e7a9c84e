"""Where `scheduler up` keeps the key it makes for its session when TINYAWS_API_KEY is unset:
a folder per address the API serves, under XDG_STATE_HOME, or ~/.local/state when that is
unset. The client writes and reads it (client/session.py); the web UI's login names it
(api/ui.py), which may not import the client: the layout is here, once."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_STATE = "~/.local/state"  # as the login shows it when XDG_STATE_HOME is unset


def address(url: str) -> tuple[str, int] | None:
    """The host (as written, lowercased) and port (the scheme's by default) of `url`, or None
    for a URL with no host."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host, port or (443 if parts.scheme == "https" else 80)


def relative(host: str, port: int) -> str:
    """The key file of the API at host:port, under the state folder."""
    return f"tinyaws-scheduler/{host}-{port}/api-key"


def state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or os.path.expanduser(DEFAULT_STATE))

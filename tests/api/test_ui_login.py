"""The login page's help shows a line that reads the file `scheduler up` keeps this server's
key in, in the reader's shell, whose XDG_STATE_HOME may be unset (the newcomer's `cat
"$XDG_STATE_HOME/..."` read `/tinyaws-scheduler/...`): up's file where it is (named after the
address `up` gave the API, SCHEDULER_URL), the home as ~; without it, the file the browser's
address would have, its folder by the variable's name or its default. Never the key; a
deployment's folders never (no up file there). Each line is run by a shell to show it reads
the key."""

from __future__ import annotations

import re
import subprocess
from html import unescape
from pathlib import Path

import pytest

from scheduler.client.session import key_path
from tests.conftest import ClientFactory

KEY = "ui-login-key"
SESSION_KEY = "up-made-this-secret"


def key_help(make_client: ClientFactory) -> str:
    page = make_client(api_key=KEY).get("/ui/login").text
    found = re.search(r'<div id="key-help">(.*?)</div>', page, re.S)
    assert found
    return unescape(found.group(1))


def run_as_shown(said: str, home: Path, **env: str) -> str:
    """What the help's `cat` line prints in a shell of the reader's: HOME, and no
    XDG_STATE_HOME unless given."""
    line = re.search(r"<pre>(cat .*?)</pre>", said, re.S)
    assert line, said
    shell = {"PATH": "/usr/bin:/bin", "HOME": str(home), **env}
    done = subprocess.run(["sh", "-c", line.group(1)], env=shell, capture_output=True, text=True)
    assert done.returncode == 0, (line.group(1), done.stderr)
    return done.stdout


def test_ups_file_outside_the_home_is_not_shown(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The login is public, and a folder outside the home may name a user (/srv/alice):
    up's file there is said as any deployment's, by the variable's name."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the state folder is not under it
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "alice-state"))
    monkeypatch.setenv("SCHEDULER_URL", "http://127.0.0.1:9001")
    # The file where `up` keeps it, as the client finds it (key_path; both sides read the
    # layout of config/up_key.py).
    kept = key_path("http://127.0.0.1:9001")
    assert kept is not None
    kept.parent.mkdir(parents=True)
    kept.write_text(SESSION_KEY)
    said = key_help(make_client)
    file = "tinyaws-scheduler/testserver-80/api-key"
    assert f'cat "${{XDG_STATE_HOME:-$HOME/.local/state}}/{file}"</pre>' in said
    assert "alice" not in said and str(tmp_path) not in said
    assert SESSION_KEY not in said  # the file's path, never the key


def test_ups_file_under_the_home_shows_as_tilde(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / "alice"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("SCHEDULER_URL", "http://127.0.0.1:9001")
    kept = key_path("http://127.0.0.1:9001")
    assert kept is not None and kept.is_relative_to(home)
    kept.parent.mkdir(parents=True)
    kept.write_text(SESSION_KEY)
    said = key_help(make_client)
    assert "cat ~/.local/state/tinyaws-scheduler/127.0.0.1-9001/api-key</pre>" in said
    assert "alice" not in said and str(tmp_path) not in said  # no user named
    assert run_as_shown(said, home) == SESSION_KEY


def test_without_ups_file_the_browsers_address_under_the_state_folder(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No file `up` made for SCHEDULER_URL (a deployment's own, or none): the file the
    browser's address would have, in the state folder by its variable's name, its default
    where the reader's shell has none; the server's folder never shows."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "server-state"))
    monkeypatch.setenv("SCHEDULER_URL", "http://api.internal:9001")
    said = key_help(make_client)
    file = "tinyaws-scheduler/testserver-80/api-key"
    assert f'cat "${{XDG_STATE_HOME:-$HOME/.local/state}}/{file}"</pre>' in said
    assert "api.internal" not in said and str(tmp_path) not in said
    mine = tmp_path / "mine"
    for state, env in (
        (tmp_path / "home" / ".local" / "state", {}),
        (mine, {"XDG_STATE_HOME": str(mine)}),
    ):
        (state / file).parent.mkdir(parents=True)
        (state / file).write_text(SESSION_KEY)
        assert run_as_shown(said, tmp_path / "home", **env) == SESSION_KEY

"""The login page's help names the file `scheduler up` keeps this server's key in: under the
server's XDG_STATE_HOME when it has one (`up` and `./dev up` honour it), named after the
address `up` gave the API (SCHEDULER_URL). The page is public: it shows the folder by its
variable's name, never its value, and never the key."""

from __future__ import annotations

import re
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


def test_the_key_file_up_wrote_for_this_server(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = tmp_path / "alice-private-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("SCHEDULER_URL", "http://127.0.0.1:9001")
    # The file where `up` keeps it, as the client finds it (key_path; both sides read the
    # layout of config/up_key.py).
    kept = key_path("http://127.0.0.1:9001")
    assert kept is not None
    kept.parent.mkdir(parents=True)
    kept.write_text(SESSION_KEY)
    said = key_help(make_client)
    # Where it is (the browser came as testserver: the file is named after up's address).
    assert f'cat "$XDG_STATE_HOME/{kept.relative_to(state)}"' in said
    assert "127.0.0.1-9001" in said
    assert "~/.local/state" not in said
    # Nothing the public page did not show before: no folder's value, no key.
    assert "alice" not in said and str(tmp_path) not in said and SESSION_KEY not in said


def test_without_ups_file_the_browsers_address_under_the_servers_state(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No file `up` made for SCHEDULER_URL (a deployment's own, or none): the file the
    browser's address would have, in the server's state folder still."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("SCHEDULER_URL", "http://api.internal:9001")
    said = key_help(make_client)
    assert 'cat "$XDG_STATE_HOME/tinyaws-scheduler/testserver-80/api-key"' in said
    assert "api.internal" not in said and str(tmp_path) not in said

"""The agent's kept node token: private to its user, never through a link, never trusted when
another user could have planted or read it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from scheduler.agent import token_file


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path, follow_symlinks=False).st_mode)


def test_a_kept_token_is_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "state" / "n1" / "node-token"
    token_file.save(path, "t0ken")
    assert token_file.load(path) == "t0ken"
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    token_file.save(path, "other")
    assert token_file.load(path) == "other"
    assert [p.name for p in path.parent.iterdir()] == ["node-token"]  # no leftovers
    token_file.save(path, "")
    assert not path.exists() and token_file.load(path) == ""


def test_a_file_others_can_read_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "node-token"
    path.write_text("planted")
    path.chmod(0o644)
    assert token_file.load(path) == ""


def test_a_link_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("someone else's file")
    target.chmod(0o600)
    link = tmp_path / "node-token"
    link.symlink_to(target)
    assert token_file.load(link) == ""
    token_file.save(link, "t0ken")
    assert target.read_text() == "someone else's file"
    assert not link.is_symlink() and token_file.load(link) == "t0ken"


def test_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError):
        token_file.save(shared / "node-token", "t0ken")
    assert not (shared / "node-token").exists()


def test_the_default_place_is_not_the_shared_temporary_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert token_file.default_path("/srv/agent", "n1") == Path("/srv/agent/n1/node-token")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert token_file.default_path("", "n1") == tmp_path / "tinyaws-agent" / "n1" / "node-token"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".local" / "state" / "tinyaws-agent" / "n1" / "node-token"
    assert token_file.default_path("", "n1") == expected

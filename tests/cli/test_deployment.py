"""`scheduler snapshot` and `restore` work on the deployment REDIS_URL names, else on the one
`scheduler up` runs (its Redis URL in <data-dir>/redis/url, --data-dir defaulting to up's),
else refuse naming both: never another Redis on 127.0.0.1:6379 unasked (cli/deployment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from scheduler.cli.deployment import url_file
from scheduler.cli.main import main
from scheduler.store.keys import Keys
from tests.snapshot_helpers import go_file, rows


@pytest.fixture(autouse=True)
def env(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an operator's shell holds beside `./dev up`: nothing of the deployment's."""
    for name in ("REDIS_URL", "SCHEDULER_DB", "SCHEDULER_SHARDS", "SCHEDULER_SHARD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_PREFIX", prefix)


def up_wrote(data_dir: Path, url: str) -> None:
    """The file `scheduler up` writes for its embedded Redis (embedded.py)."""
    url_file(data_dir).parent.mkdir(parents=True)
    url_file(data_dir).write_text(url + "\n")


@pytest.mark.parametrize("command", [["snapshot"], ["restore", "--from", "go.db"]])
def test_without_redis_url_or_up_they_refuse_naming_both(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(command) == 2
    out, err = capsys.readouterr()
    wanted = f"{tmp_path / 'data' / 'redis' / 'url'} does not exist"
    assert out == "" and wanted in err
    assert "set REDIS_URL" in err and "--data-dir" in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "scheduler.db").exists()
    assert main([*command, "--data-dir", str(tmp_path / "elsewhere")]) == 2
    assert f"{tmp_path / 'elsewhere' / 'redis' / 'url'} does not exist" in capsys.readouterr().err


def test_they_find_the_redis_of_up_in_the_default_data_dir(
    redis_url: str,
    prefix: str,
    rclient: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    up_wrote(tmp_path / "data", redis_url)
    go_file(tmp_path / "go.db")

    assert main(["restore", "--from", "go.db"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"restored 2 jobs from {tmp_path / 'go.db'} ")
    assert out.endswith(f" from {url_file(tmp_path / 'data')})\n")
    assert rclient.exists(Keys(prefix).job("job-99")) == 1  # into up's Redis

    # Its snapshot file is up's: the data dir's scheduler.db.
    assert main(["snapshot"]) == 0
    db = tmp_path / "data" / "scheduler.db"
    assert capsys.readouterr().out.startswith(f"snapshot: 2 changed jobs written to {db} (Redis ")
    assert set(rows(db)) == {"job-99", "not-a-job"}


def test_redis_url_comes_first_and_the_url_never_shows_its_password(
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    up_wrote(tmp_path / "data", "unix://:s3cret@/nowhere/valkey.sock?db=0")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("SCHEDULER_DB", str(tmp_path / "mine.db"))
    assert main(["snapshot", "--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    assert out.endswith(f"written to {tmp_path / 'mine.db'} (Redis {redis_url} from REDIS_URL)\n")

    monkeypatch.delenv("REDIS_URL")
    assert main(["snapshot", "--data-dir", str(tmp_path / "data")]) == 1
    _, err = capsys.readouterr()
    assert err.startswith("scheduler snapshot: not written: ") and "s3cret" not in err
    assert f"(is the `scheduler up` that wrote {url_file(tmp_path / 'data')} running?)" in err


def test_a_url_file_without_a_url_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up_wrote(tmp_path / "data", "not a url")
    assert main(["snapshot", "--data-dir", str(tmp_path / "data")]) == 2
    assert "holds no Redis URL: set REDIS_URL" in capsys.readouterr().err

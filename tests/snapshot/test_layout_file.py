"""Shard 0's snapshot file and the sharded layout's record in it (snapshot/layout.py): a
restore from another file than SCHEDULER_DB leaves the record for the next snapshot to write
there; the file is read for the shard count only when Redis lost its data, a file that is not
SQLite then refused as the rest of the snapshot refuses it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.cli.main import main as cli_main
from scheduler.config import Settings
from scheduler.snapshot import layout
from scheduler.snapshot.db import SnapshotFileError
from scheduler.snapshot.restore import restore_from_file
from scheduler.snapshot.writer import write_snapshot
from scheduler.store.errors import LayoutChanged
from scheduler.store.keys import Keys
from tests.api.test_shards import SHARDS, shard_nodes
from tests.conftest import ClientFactory, SettingsFactory, register, submit
from tests.snapshot_helpers import lose_redis_data

NOT_SQLITE = b"not a database, " * 64


def sharded(settings: Settings) -> None:
    """A sharded deployment with nodes and jobs, stopped (it would flush its metrics)."""
    with TestClient(create_app(settings)) as api:
        register(api, *(shard_nodes(k)[0] for k in range(SHARDS)))
        [submit(api, command=f"c{i}") for i in range(6)]


def copy(source: Path, target: Path) -> None:
    """A consistent copy of a snapshot file in WAL mode (its last commits may be in -wal)."""
    with sqlite3.connect(source) as reader, sqlite3.connect(target) as writer:
        reader.backup(writer)
    reader.close()
    writer.close()


def remove(path: Path) -> None:
    for name in (path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")):
        name.unlink(missing_ok=True)


def test_a_restore_from_another_file_writes_the_layout_to_scheduler_db(
    make_settings: SettingsFactory, rclient: redis.Redis, db: Path, tmp_path: Path
) -> None:
    """`scheduler restore --from backup.db` marked the layout as filed, so SCHEDULER_DB never
    got it back: the next loss of shard 0 lost the count (another one was let in) and the
    nodes kept on shard 0."""
    settings = make_settings(shards=SHARDS)
    sharded(settings)
    zero = settings.served()
    write_snapshot(zero, wait=True)
    record = layout.filed(str(db))
    assert record["count"] == str(SHARDS)
    backup = tmp_path / "backup.db"
    copy(db, backup)
    remove(db)
    lose_redis_data(rclient, zero.redis_prefix)

    restore_from_file(zero, str(backup))
    write_snapshot(zero, wait=True)
    assert layout.filed(str(db)) == record
    lose_redis_data(rclient, zero.redis_prefix)
    with pytest.raises(LayoutChanged):
        layout.check_layout(make_settings(shards=2))


def test_a_restore_from_scheduler_db_leaves_nothing_to_write(
    make_settings: SettingsFactory, rclient: redis.Redis, db: Path
) -> None:
    """The file restored from is the one the snapshot writes: it holds the record already."""
    settings = make_settings(shards=SHARDS)
    sharded(settings)
    zero = settings.served()
    write_snapshot(zero, wait=True)
    lose_redis_data(rclient, zero.redis_prefix)

    restore_from_file(zero, str(db))
    keys = Keys(zero.redis_prefix)
    assert rclient.hget(keys.shards, "filed") == rclient.hget(keys.shards, "since")


def test_a_file_that_is_not_sqlite_is_not_read_while_redis_holds_its_data(
    make_client: ClientFactory, make_settings: SettingsFactory, db: Path
) -> None:
    """Every start of a never-sharded deployment read the file for a count: one that is not
    SQLite raised sqlite3's DatabaseError out of serve, the worker and the API, which read
    nothing of the file at start once Redis answered the restore question."""
    settings = make_settings()
    make_client(settings)  # the restore question answered: started empty
    db.write_bytes(NOT_SQLITE)

    layout.check_layout(settings)  # serve's and the worker's
    make_client(settings)  # the API's


def test_a_file_that_is_not_sqlite_is_refused_when_redis_lost_its_data(
    make_settings: SettingsFactory,
    db: Path,
    tmp_path: Path,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Then the count is looked for in it: a snapshot file error, as the restore's that
    follows; `scheduler snapshot` and `scheduler restore --from` it say so (they died with
    sqlite3's traceback)."""
    settings = make_settings()
    db.write_bytes(NOT_SQLITE)
    with pytest.raises(SnapshotFileError, match="not a SQLite snapshot"):
        layout.check_layout(settings)

    for name, value in {"REDIS_URL": settings.redis_url, "REDIS_PREFIX": prefix}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SCHEDULER_DB", str(db))
    assert cli_main(["snapshot"]) == 1
    assert "not written: " in capsys.readouterr().err
    monkeypatch.setenv("SCHEDULER_DB", str(tmp_path / "other.db"))
    assert cli_main(["restore", "--from", str(db)]) == 1
    assert "not a SQLite snapshot" in capsys.readouterr().err

"""The hashes kept as snapshot tables (snapshot/tables.py CountedHash: the drains, the
quotas): a file from before a table was added has none, and restores with none of it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
import redis

from scheduler.config import Settings
from scheduler.snapshot.drains import DRAINS
from scheduler.snapshot.quotas import QUOTAS
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.tables import CountedHash
from scheduler.snapshot.writer import write_snapshot
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, register, submit
from tests.snapshot_helpers import lose_redis_data


@pytest.mark.parametrize("table", [DRAINS, QUOTAS], ids=lambda table: table.table)
def test_a_file_from_before_the_table_restores_with_none(
    make_client: ClientFactory,
    settings: Settings,
    rclient: redis.Redis,
    db: Path,
    table: CountedHash,
) -> None:
    api = make_client(settings)
    register(api, "n1")
    submit(api, command="x")
    write_snapshot(settings)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table.table}")
        conn.commit()
    lose_redis_data(rclient, settings.redis_prefix)
    assert restore_if_empty(settings)
    assert rclient.exists(table.hash_of(Keys(settings.redis_prefix))) == 0

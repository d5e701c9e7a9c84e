"""A field added to models.job.Job, and nowhere else, goes everywhere a job goes (issue 21): submit,
snapshot, a Redis that lost its data, restore, GET, `status --json`, the UI's job page. A
snapshot file written before the field existed restores with the field at its default, and the
next snapshot gives the file the field's column.

The field is added the way a contributor adds one: a line in Job, in a copy of the code that a
subprocess runs (tests/snapshot/added_field_probe.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from scheduler.config import Settings
from scheduler.snapshot.writer import snapshot_once
from tests.conftest import ClientFactory, SettingsFactory, register, submit
from tests.snapshot_helpers import columns, rows

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = "    port: Annotated[int, SUBMITTED] = 0\n"
ADDED = "    weight: Annotated[int, SUBMITTED] = 0\n"


def copy_with_weight(dest: Path) -> None:
    """scheduler/ and workers/ into `dest`, with `weight` added to Job after `port`."""
    for part in ("scheduler", "workers"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    models = dest / "scheduler" / "models" / "job.py"
    source = models.read_text()
    assert source.count(ANCHOR) == 1, "Job's port line moved: update ANCHOR"
    models.write_text(source.replace(ANCHOR, ANCHOR + ADDED))


def probe(code: Path, settings: Settings, new_db: Path, old_db: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "TINYAWS_"))}
    # The copy first, so its scheduler is the one imported; the repository for tests/.
    env["PYTHONPATH"] = os.pathsep.join([str(code), str(ROOT)])
    prefix = settings.redis_prefix
    argv = [settings.redis_url, f"{prefix}-new", str(new_db), f"{prefix}-old", str(old_db)]
    done = subprocess.run(
        [sys.executable, "-m", "tests.snapshot.added_field_probe", *argv],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert result["models"] == str(code / "scheduler" / "models" / "job.py")
    return result


def test_a_field_added_to_job_goes_everywhere(
    make_client: ClientFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    # A snapshot file written by the code as it is, without the field.
    old_db, new_db = tmp_path / "old.db", tmp_path / "new.db"
    settings = make_settings(scheduler_db=str(old_db))
    client = make_client(settings)
    register(client, "n1")
    assert submit(client, command="echo old")["job_id"] == "job-1"
    assert snapshot_once(settings) == 1
    assert "weight" not in columns(old_db)

    copy_with_weight(tmp_path / "code")
    result = probe(tmp_path / "code", settings, new_db, old_db)

    new = result["new"]
    assert new["created"][0] == 201 and new["created"][1]["weight"] == 7
    assert (new["written"], new["restored"]) == (1, True)
    job = new["get"]
    assert job["weight"] == 7 and job == new["created"][1]
    # In the record, in Job's order: after port, before status.
    assert list(job)[list(job).index("weight") + 1] == "status"
    assert new["cli"] == [0, job]
    assert "<tr><th>weight</th><td>7</td></tr>" in new["ui"]
    assert "weight" in columns(new_db) and rows(new_db)["job-1"]["weight"] == 7

    old = result["old"]
    assert old["restored"] is True
    assert old["get"]["command"] == "echo old"
    assert "weight" not in old["get"]  # its default, 0, which the wire omits
    assert old["cli"] == [0, old["get"]]
    assert "<th>weight</th>" not in old["ui"]  # at its default: the request leaves it out
    # The modified code's snapshot migrated the older file: the old row at the default.
    assert old["next"][1]["job_id"] == "job-2" and old["written"] == 1
    saved = rows(old_db)
    assert (saved["job-1"]["weight"], saved["job-2"]["weight"]) == (0, 3)

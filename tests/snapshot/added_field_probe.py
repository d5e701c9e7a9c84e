"""Run by test_added_field.py in a subprocess whose PYTHONPATH starts at a copy of scheduler/
and workers/ where models.job.Job has one more field, `weight`: what that code does with it,
printed as JSON for the test to judge. Not a test module itself (it must not import the
unmodified code)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

import httpx
import redis
from starlette.testclient import TestClient

import scheduler.models.job
from scheduler.api.app import create_app
from scheduler.cli.main import main as cli_main
from scheduler.config import Settings
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from tests.servers import STOPPING, serving
from tests.snapshot_helpers import lose_redis_data


def settings(redis_url: str, prefix: str, db: str) -> Settings:
    return Settings.from_env(
        {}, redis_url=redis_url, redis_prefix=prefix, scheduler_db=db, allowed_hosts="testserver"
    )


def served(config: Settings, job_id: str) -> dict[str, Any]:
    """The job as a restarted scheduler serves it: GET, `status --json`, the UI's row."""
    with serving(create_app(config)) as port:
        url = f"http://127.0.0.1:{port}"
        got = httpx.get(f"{url}/jobs/{job_id}").json()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli_main(["status", job_id, "--json", "--scheduler-url", url])
        page = httpx.get(f"{url}/ui/jobs/{job_id}").text
    return {"get": got, "cli": [code, json.loads(out.getvalue())], "ui": page}


def submit(config: Settings, body: dict[str, Any]) -> tuple[int, Any]:
    """POST /jobs through the app (with node n1 registered): (status, reply)."""
    with TestClient(create_app(config)) as client:
        node = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
        assert client.post("/nodes/register", json=node).status_code == 201
        created = client.post("/jobs", json=body)
    return created.status_code, created.json()


def submitted_and_restored(redis_url: str, prefix: str, db: str) -> dict[str, Any]:
    """Submit with weight 7, snapshot, lose Redis, restore."""
    config = settings(redis_url, prefix, db)
    created = submit(config, {"command": "echo hi", "weight": 7})
    written = snapshot_once(config)
    r = redis.Redis.from_url(redis_url)
    lose_redis_data(r, prefix)
    r.close()
    restored = restore_if_empty(config)
    return {
        "created": created,
        "written": written,
        "restored": restored,
        **served(config, created[1]["job_id"]),
    }


def older_file(redis_url: str, prefix: str, db: str) -> dict[str, Any]:
    """A file the unmodified code wrote, restored into an empty Redis; then a new job with
    weight 3 and the snapshot that writes it into that file."""
    config = settings(redis_url, prefix, db)
    restored = restore_if_empty(config)
    result = {"restored": restored, **served(config, "job-1")}
    result["next"] = submit(config, {"command": "echo next", "weight": 3})
    result["written"] = snapshot_once(config)
    return result


def main() -> None:
    redis_url, new_prefix, new_db, old_prefix, old_db = sys.argv[1:]
    print(
        json.dumps(
            {
                "models": scheduler.models.job.__file__,
                "new": submitted_and_restored(redis_url, new_prefix, new_db),
                "old": older_file(redis_url, old_prefix, old_db),
            }
        )
    )
    # The servers `serving` left shutting down, joined before the interpreter ends: one
    # still in its event loop then can crash the process (SIGSEGV) as it exits.
    for thread in STOPPING:
        thread.join(timeout=30)


if __name__ == "__main__":
    main()

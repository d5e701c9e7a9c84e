"""`scheduler retry`: start failed jobs over (POST /jobs/retry), by id or the whole dead set
(`--failed`: every failed job, read page by page). HTTP only, through the client's `Client`."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from scheduler.cli.client import Client, ClientError, _common, _handler, _print_json
from scheduler.cli.listing import _get_json

BATCH = 1000  # the API's bound on one POST /jobs/retry


def _failed_ids(client: Client) -> list[str]:
    """Every failed job's id, oldest first (GET /jobs?status=failed, paged)."""
    ids: list[str] = []
    while True:
        params = {"status": "failed", "limit": str(BATCH)}
        if ids:
            params["after"] = ids[-1]
        page = _get_json(client, "/jobs", params)
        ids.extend(job["job_id"] for job in page)
        if len(page) < BATCH:
            return ids


def retry(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    ids = _failed_ids(client) if args.failed else args.job_ids
    if not ids:
        raise ClientError("retry: no job to retry (name job ids, or --failed)")
    answer: dict[str, list[Any]] = {}
    for start in range(0, len(ids), BATCH):
        response = client.request(
            "POST", "/jobs/retry", json={"job_ids": ids[start : start + BATCH]}
        )
        if response.status_code >= 400:
            raise ClientError(f"retry failed {response.status_code}: {response.text.rstrip()}")
        for name, listed in response.json().items():
            answer.setdefault(name, []).extend(listed)
    if args.json:
        _print_json(answer, out)
    else:
        for name in (
            "retried",
            "not_found",
            "not_failed",
            "unplaced",
            "blocked",
            "too_many_waiters",
        ):
            if answer.get(name):
                out.write(f"{name.replace('_', ' ')}: {' '.join(answer[name])}\n")
    return 0 if len(answer.get("retried", [])) == len(set(ids)) else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("retry", help="start failed jobs over: scheduler retry job-3 [--failed]")
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="the failed jobs to start over")
    p.add_argument("--failed", action="store_true", help="every failed job (the dead set)")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(retry))

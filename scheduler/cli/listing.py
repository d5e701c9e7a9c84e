"""`scheduler list` and `scheduler nodes`: the job listing, paged oldest or newest first
with a `more:` line, and the node table. HTTP only, through the client's `Client`."""

from __future__ import annotations

import argparse
import shlex
from typing import Any, TextIO

from scheduler.cli.client import (
    Client,
    ClientError,
    _common,
    _handler,
    _positive,
    _print_json,
)
from scheduler.cli.output import format_job
from scheduler.models.job import STATUSES

PAGE = 1000  # the API's default page, and `list`'s
MAX_PAGE = 10000  # the API's largest


def _get_json(client: Client, path: str, params: dict[str, str]) -> Any:
    response = client.request("GET", path, params=params)
    if response.status_code >= 400:
        raise ClientError(
            f"error: scheduler returned {response.status_code}: {response.text.rstrip()}"
        )
    try:
        return response.json()
    except ValueError as exc:
        raise ClientError(f"decode: {exc}") from None


def _next_page(args: argparse.Namespace, last: str) -> str:
    """The command that lists the page after the one printed, ending at job `last`."""
    words = ["scheduler", "list"]
    if args.node_id:
        words += ["--node-id", args.node_id]
    if args.status:
        words += ["--status", args.status]
    if args.schedule:
        words += ["--schedule", args.schedule]
    if args.limit != PAGE:
        words += ["--limit", str(args.limit)]
    words += ["--newest", "--before", last] if args.newest else ["--after", last]
    return shlex.join(words)


# A job's fields a listing line shows: the original's, and why a pending job has no node.
_LISTED = ("job_id", "node_id", "status", "pending_reason", "command")


def list_jobs(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """A page of at most --limit jobs (oldest first, or --newest first); when more follow, a
    last line on stderr says how to list them: `more: scheduler list --after job-1000`."""
    newest = args.newest or bool(args.before)
    args.newest = newest
    if args.after and newest:
        raise ClientError("error: --after pages oldest first: use --before with --newest")
    base = {"node_id": args.node_id, "status": args.status, "schedule": args.schedule}
    if newest:
        base["order"] = "newest"
    bound = args.before if newest else args.after
    # One more job than --limit, to know whether there are more; a page the API cut short
    # (its byte budget) is followed by the next one.
    jobs: list[dict[str, Any]] = []
    while len(jobs) <= args.limit:
        params = dict(base, limit=str(min(args.limit + 1 - len(jobs), MAX_PAGE)))
        if bound:
            params["before" if newest else "after"] = bound
        page = _get_json(client, "/jobs", {k: v for k, v in params.items() if v})
        if not isinstance(page, list):
            raise ClientError("decode: the scheduler did not answer with a list of jobs")
        if not page:
            break
        jobs += page
        bound = str(page[-1].get("job_id", ""))
    more = len(jobs) > args.limit
    jobs = jobs[: args.limit]
    if args.json:
        _print_json(jobs, out)
    else:
        for job in jobs:
            out.write(format_job({k: job.get(k, "") for k in _LISTED}))
    if more:
        out.flush()
        err.write(f"more: {_next_page(args, str(jobs[-1].get('job_id', '')))}\n")
    return 0


def nodes(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """GET /nodes as a table: id, role, status, last heartbeat."""
    params = {"role": args.role} if args.role else {}
    found = _get_json(client, "/nodes", params)
    if not isinstance(found, dict):
        raise ClientError("decode: the scheduler did not answer with the nodes")
    if args.json:
        _print_json(found, out)
        return 0
    rows: list[tuple[str, ...]] = [("ID", "ROLE", "STATUS", "LAST HEARTBEAT")]
    for node_id in sorted(found):
        node = found[node_id] if isinstance(found[node_id], dict) else {}
        status = str(node.get("status", ""))
        if node.get("drained"):
            status += f" (drained by {node.get('drained_by', '')})"
        cells = (node_id, node.get("role", ""), status, node.get("last_seen", ""))
        rows.append(tuple(str(cell) or "-" for cell in cells))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)))
        out.write(f"  {row[3]}\n")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("list", help="list jobs, oldest first (--newest: newest first)")
    p.add_argument("--node-id", default="", metavar="ID", help="only this node's jobs")
    p.add_argument(
        "--status", default="", choices=["", *STATUSES], help="only jobs with this status"
    )
    p.add_argument(
        "--limit", type=_positive, default=PAGE, help=f"at most this many jobs (default {PAGE})"
    )
    p.add_argument(
        "--schedule", default="", metavar="NAME", help="only the jobs this schedule made"
    )
    p.add_argument("--newest", action="store_true", help="newest first")
    p.add_argument("--after", default="", metavar="JOB_ID", help="oldest first, after this job")
    p.add_argument("--before", default="", metavar="JOB_ID", help="newest first, before this job")
    _common(p)
    p.set_defaults(handler=_handler(list_jobs))

    p = sub.add_parser("nodes", help="list the nodes: id, role, status, last heartbeat")
    p.add_argument("--role", default="", help="only nodes with this role (compute, storage)")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(nodes))

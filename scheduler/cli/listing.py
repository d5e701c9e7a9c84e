"""`scheduler list` and `scheduler nodes`: the job listing, paged oldest or newest first
with a `more:` line, and the node table, read through scheduler.client's `Client`."""

from __future__ import annotations

import argparse
import itertools
import shlex
from typing import TextIO

from scheduler.cli.client import _common, _handler, _positive, fields, print_json
from scheduler.cli.output import format_job, table
from scheduler.cli.refusals import ClientError
from scheduler.client import Client, SchedulerError
from scheduler.client.ops import PAGE
from scheduler.models.job import ENDINGS, STATUSES


def _next_page(args: argparse.Namespace, last: str) -> str:
    """The command that lists the page after the one printed, ending at job `last`."""
    words = ["scheduler", "list"]
    if args.node_id:
        words += ["--node-id", args.node_id]
    if args.status:
        words += ["--status", args.status]
    if args.schedule:
        words += ["--schedule", args.schedule]
    if args.namespace:
        words += ["--namespace", args.namespace]
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
    found = client.jobs(
        status=args.status,
        node_id=args.node_id,
        schedule=args.schedule,
        namespace=args.namespace,
        newest=newest,
        after=args.after,
        before=args.before,
        page_size=min(args.limit + 1, PAGE),
    )
    # One more job than --limit, to know whether there are more.
    jobs = list(itertools.islice(found, args.limit + 1))
    more = len(jobs) > args.limit
    jobs = jobs[: args.limit]
    if args.json:
        print_json(jobs, out)
    else:
        for job in jobs:
            listed = fields(job)
            out.write(format_job({name: listed.get(name, "") for name in _LISTED}))
    if more:
        out.flush()
        err.write(f"more: {_next_page(args, jobs[-1].job_id)}\n")
    if not jobs and args.node_id:
        return _no_jobs_on(client, args.node_id, out, err)
    return 0


def _no_jobs_on(client: Client, node_id: str, out: TextIO, err: TextIO) -> int:
    """Why a listing by node is empty: no such node (a typo, as `drain` says: exit 1), or
    none of its jobs match (exit 0). One more read, only for an empty listing."""
    try:
        known = node_id in client.nodes()
    except SchedulerError:  # a key that may list jobs but not nodes: nothing more to say
        return 0
    out.flush()
    if not known:
        raise ClientError(f"error: node {node_id} not found (`scheduler nodes` lists them)")
    err.write(f"no jobs on node {node_id} match\n")
    return 0


# A node's labels in its row: `gpu=a100,zone=b`, cut to this many characters (`...` ends a
# cut one; --json has them whole).
LABELS_WIDTH = 40


def labels_cell(labels: dict[str, str]) -> str:
    """The labels, sorted, as KEY=VALUE joined by commas: what --select matches."""
    text = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
    return text if len(text) <= LABELS_WIDTH else text[: LABELS_WIDTH - 3] + "..."


def nodes(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """The nodes as a table: id, role, status, what each offers (cpus, memory, labels: what a
    job's --cpus, --memory-mb and --select are placed by), last heartbeat."""
    found = client.nodes(role=args.role)
    if args.json:
        print_json(found, out)
        return 0
    rows: list[tuple[str, ...]] = [
        ("ID", "ROLE", "STATUS", "CPUS", "MEMORY_MB", "LABELS", "LAST_HEARTBEAT")
    ]
    for node_id in sorted(found):
        node = found[node_id]
        status = node.status
        if node.drained is True:
            status += f" (drained by {node.drained_by or ''})"
        offers = (str(node.cpu_count or ""), str(node.memory_mb or ""), labels_cell(node.labels))
        cells = (node_id, node.role, status, *offers, node.last_seen)
        rows.append(tuple(cell or "-" for cell in cells))
    table(rows, out)
    return 0


def _status(text: str) -> str:
    """A status to list; `cancelled`, which the UI shows as its own, is told what it is on the
    wire (the original's clients know only done and failed as endings). "" (the default,
    which argparse reads through this too): any."""
    if text == "" or text in STATUSES:
        return text
    if text == ENDINGS["cancelled"][1]:
        raise argparse.ArgumentTypeError(
            "a cancelled job's status is failed (its failure_reason says cancelled): use "
            "--status failed"
        )
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(STATUSES)})"
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("list", help="list jobs, oldest first (--newest: newest first)")
    p.add_argument("--node-id", default="", metavar="ID", help="only this node's jobs")
    p.add_argument(
        "--status",
        default="",
        type=_status,
        metavar="STATUS",
        help=f"only jobs with this status: {', '.join(STATUSES)} (a cancelled job is failed)",
    )
    p.add_argument(
        "--limit", type=_positive, default=PAGE, help=f"at most this many jobs (default {PAGE})"
    )
    p.add_argument(
        "--schedule", default="", metavar="NAME", help="only the jobs this schedule made"
    )
    p.add_argument(
        "--namespace",
        default="",
        metavar="NS",
        help="only this namespace's jobs (`default`: the default namespace's); without it, "
        "every namespace the key may read",
    )
    p.add_argument("--newest", action="store_true", help="newest first")
    p.add_argument("--after", default="", metavar="JOB_ID", help="oldest first, after this job")
    p.add_argument("--before", default="", metavar="JOB_ID", help="newest first, before this job")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(list_jobs))

    p = sub.add_parser(
        "nodes",
        help="list the nodes: id, role, status, cpus, memory, labels, last heartbeat",
    )
    p.add_argument("--role", default="", help="only nodes with this role (compute, storage)")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(nodes))

"""`scheduler cancel ID [ID]...`: each job cancelled in turn, one request each (a pending
job ends at once, a running one is cancelling until its agent has stopped it)."""

from __future__ import annotations

import argparse
from typing import TextIO

import msgspec

from scheduler.cli.client import _common, _echo, _handler, fields, print_json
from scheduler.cli.output import format_job
from scheduler.cli.refusals import said
from scheduler.client import ApiError, Client
from scheduler.models.job import FINAL_STATUSES as FINAL


def cancel(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """Each job in turn: a pending one is cancelled at once, a running one is cancelling
    until its agent has stopped it (--wait waits for that). A job refused (not found,
    already finished) has its error line and the next is tried; exit 1 unless every one was
    cancelled. A refused key ends it (each further try would be another wrong key). --json:
    the job's JSON; with several ids, each job's on a line of its own."""
    cancelled = 0
    for job_id in args.job_ids:
        try:
            job = client.cancel(job_id)
            if args.wait and job.status not in FINAL:
                job = client.wait(job_id, poll_secs=args.poll_secs)
        except ApiError as exc:
            error = said(exc)
            if error.refused_key or error.locked_for:
                raise error from None
            out.flush()
            print(error, file=err)
            continue
        if args.json and len(args.job_ids) > 1:
            # A job a line (JSON lines, as a batch's --json): one value per job, each parsed
            # alone; indented objects back to back were no one JSON document.
            _echo(msgspec.json.encode(job).decode() + "\n", out)
        elif args.json:
            print_json(job, out)
        else:
            _echo(format_job(fields(job)), out)
        cancelled += 1
    return 0 if cancelled == len(args.job_ids) else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cancel",
        help="cancel jobs, or stop services: scheduler cancel job-1 [job-2 ...] [--wait]",
    )
    p.add_argument("job_ids", nargs="+", metavar="JOB_ID", help="each job's id, e.g. job-1")
    p.add_argument("--wait", action="store_true", help="wait until each job is cancelled")
    _common(p)
    p.set_defaults(handler=_handler(cancel))

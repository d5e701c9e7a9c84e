"""`scheduler retry`: start failed jobs over (POST /jobs/retry), by id or the dead set
(`--failed`: every failed job, read page by page), through scheduler.client's `Client`.

`--failed` says which jobs it will retry and asks first (`--yes` answers for a script; with
no terminal to ask on and no `--yes` it retries nothing). It leaves cancelled jobs alone (an
operator stopped them: a cancelled `sleep 60` must not come back) unless
`--include-cancelled`. Only the jobs it listed are sent, so a job that fails while it asks
waits for the next `--failed`. The jobs retried are a line on stdout; each other one an error
on stderr saying why (`refusal`), as every command says one."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from scheduler.cli.client import _common, _handler, print_json, usage_error
from scheduler.cli.refusals import ClientError
from scheduler.client import Client, RetryAnswer, SchedulerError
from scheduler.models.job import Job, cancelled_on_purpose
from scheduler.models.retry import REFUSALS, blocked_words

SHOWN = 20  # the jobs `--failed` lists before asking; the rest are counted
ANSWERS = ("retried", "not_found", "not_failed", "unplaced", "blocked", "too_many_waiters")


def _why(job: Job) -> str:
    if job.failure_reason:
        return job.failure_reason
    return "failed" if job.exit_code is None else f"exit {job.exit_code}"


def plan(jobs: list[Job], left: int) -> str:
    """What `--failed` will retry, a job a line (the first SHOWN), and what it leaves."""
    lines = [f"retry: {len(jobs)} failed job(s) to start over:"]
    for job in jobs[:SHOWN]:
        command = job.command or job.deploy_url
        lines.append(f"  {job.job_id}  {_why(job)}  {command[:60]}")
    if len(jobs) > SHOWN:
        lines.append(f"  ... and {len(jobs) - SHOWN} more")
    if left:
        lines.append(f"left alone: {left} cancelled (--include-cancelled retries them too)")
    return "".join(line + "\n" for line in lines)


def confirmed(args: argparse.Namespace, count: int, err: TextIO) -> bool:
    """--yes, or the operator's yes on the terminal. ClientError without a terminal."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ClientError("error: nothing retried: no terminal to ask on; add --yes to retry them")
    err.write(f"retry these {count} job(s)? [y/N] ")
    err.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _chosen(args: argparse.Namespace, client: Client, err: TextIO) -> list[str] | None:
    """The ids to retry: those named, or the dead set once confirmed; None: none to retry,
    and nothing to say but that."""
    if not args.failed:
        if not args.job_ids:
            usage_error(args, "no job to retry: name job ids, or --failed")
        return list(args.job_ids)
    if args.job_ids:
        usage_error(args, "name job ids or --failed, not both")
    failed = list(client.jobs(status="failed"))
    jobs = [j for j in failed if args.include_cancelled or not cancelled_on_purpose(j)]
    if not jobs:
        left = f" ({len(failed)} cancelled left alone)" if failed else ""
        err.write(f"retry: no failed job to retry{left}\n")
        return None
    err.write(plan(jobs, len(failed) - len(jobs)))
    if not confirmed(args, len(jobs), err):
        raise ClientError("error: nothing retried")
    return [job.job_id for job in jobs]


def _not_failed(client: Client, job_id: str) -> str:
    """`job-3 is running, not failed`: its status as read now ("not failed" when it cannot
    be read: it was deleted since, say)."""
    try:
        return f"{job_id} is {client.job(job_id).status}, not failed"
    except SchedulerError:
        return f"{job_id} is not failed"


def refusal(client: Client, answer: RetryAnswer, name: str, job_id: str) -> str:
    """Why `job_id` was not retried, in every command's form (`error: <message>`), from the
    answer's list `name` it is in (the API's words for POST /jobs/{id}/retry's refusals)."""
    if name == "not_failed":  # with its status, read apart: the answer does not say it
        why = f"{_not_failed(client, job_id)}: nothing to retry"
    elif name == "blocked":
        failed = (answer.blocked_by or {}).get(job_id, "")
        why = f"{job_id}: blocked: " + (
            blocked_words(failed) if failed else "a job it runs after did not succeed"
        )
    else:
        hint = " (`scheduler nodes` lists them)" if name == "unplaced" else ""
        why = f"{job_id}: {REFUSALS[name]}{hint}"
    return f"error: {why}\n"


def retry(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    ids = _chosen(args, client, err)
    if ids is None:
        return 0
    answer = client.retry_many(ids)
    if args.json:
        print_json(answer, out)
    elif answer.retried:
        out.write(f"retried: {' '.join(answer.retried)}\n")
    out.flush()
    if not args.json:
        for name in (name for name in ANSWERS if name != "retried"):
            for job_id in getattr(answer, name) or ():
                err.write(refusal(client, answer, name, job_id))
    return 0 if len(answer.retried) == len(set(ids)) else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "retry", help="start failed jobs over: scheduler retry job-3, or retry --failed"
    )
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="the failed jobs to start over")
    p.add_argument(
        "--failed",
        action="store_true",
        help="every failed job (the dead set) but the cancelled: lists them, then asks",
    )
    p.add_argument(
        "--include-cancelled", action="store_true", help="with --failed: the cancelled ones too"
    )
    p.add_argument("--yes", "-y", action="store_true", help="with --failed: retry without asking")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(retry), usage_error=p.error)

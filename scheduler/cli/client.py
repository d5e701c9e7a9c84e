"""The command-line client: `scheduler submit`, `status`, `cancel` (and, in their own modules,
`list`, `nodes`, `retry`, `drain`, `schedule`, `key`, `logs`, `events`), built on the product's
Python client, scheduler.client's `Client`: every call is one of its typed methods, every error
one of its exceptions, said in one form by every command (refusals.py `said`: `error:
<message> (<HTTP status>)`, a job's field named as the option that set it). This package
keeps only the arguments and the output.

Output is the original tinyaws CLI's (CONTRACT 7): `submitted <id> on node <node>
(status=<status>)`, and for a job `job_id=… node_id=… status=… command="…"`, then
`exit_code=N`, `stdout:` and `stderr:` blocks when present. New: `--json` prints the
answer's JSON instead, `submit --wait` waits and prints the job's own output (so
`scheduler submit 'echo hello' --wait` prints hello; its `submitted` line goes to stderr),
`list`, `nodes`, `--env`, `--service`.
Everything that is not the command's result goes to stderr: the status changes `--wait` sees
(`job-3 running on node-1`), a warning of a job submitted that no node can take (`warning:
job-12 has no node to run on (no_fit): ...`) or that has already failed (`warning: job-36
has already failed (dependency_failed): ...`, exit 1), `list`'s `more: …` line, and after a
401 or the 429 of too many wrong keys a hint naming TINYAWS_API_KEY (the 429's with when to
try again).
SCHEDULER_URL (default http://127.0.0.1:9001) and TINYAWS_API_KEY come from the environment.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any, TextIO

import msgspec

from scheduler.cli.job_options import OptionError, add_job_options, idempotency_key, job_body
from scheduler.cli.output import (
    attempt_line,
    ended_warning,
    exit_status,
    format_job,
    keeps_running,
    progress,
    unplaced_warning,
)
from scheduler.cli.refusals import (
    USAGE,
    ClientError,
    auth_hint,
    lockout_hint,
    refused_option,
    said,
    submitting,
)
from scheduler.client import Client, NotFound, SchedulerError
from scheduler.config import Settings
from scheduler.models.attempt import Attempt
from scheduler.models.job import FINAL_STATUSES as FINAL
from scheduler.models.job import Job
from scheduler.models.queue_place import in_words


def connect(url: str, settings: Settings) -> Client:
    """The client of the scheduler at `url` (--scheduler-url, else SCHEDULER_URL). It fails
    fast: a command against no scheduler at all says so at once; once the scheduler has
    answered, a call is sent again as the client's retries say (a replica restarting while
    `status --wait` waits)."""
    return Client(
        url or settings.scheduler_url,
        settings.api_key,
        timeout=settings.http_timeout_secs,
        fail_fast=True,
    )


Command = Callable[[argparse.Namespace, Client, TextIO, TextIO], int]


def run(
    command: Command, args: argparse.Namespace, client: Client, out: TextIO, err: TextIO
) -> int:
    """The command's exit status; what ends it (a ClientError, an option's value refused, any
    library error) said on `err`, with the hint after a refused key."""
    try:
        return command(args, client, out, err)
    except ClientError as exc:
        error = exc
    except OptionError as exc:
        error = refused_option(exc)
    except SchedulerError as exc:
        error = said(exc)
    out.flush()
    print(error, file=err)
    if error.refused_key:
        print(auth_hint("authorization" in client.http.headers), file=err)
    if error.locked_for:
        print(lockout_hint(error.locked_for), file=err)
    return error.exit_status


def _handler(command: Command) -> Callable[[argparse.Namespace, Settings], int]:
    def handle(args: argparse.Namespace, settings: Settings) -> int:
        with connect(args.scheduler_url, settings) as client:
            try:
                return run(command, args, client, sys.stdout, sys.stderr)
            except KeyboardInterrupt:  # 128 + SIGINT, as a shell's; the job is not stopped
                sys.stdout.flush()
                sys.stderr.write(getattr(args, "on_interrupt", ""))
                return 130

    return handle


def fields(value: msgspec.Struct) -> dict[str, Any]:
    """A typed answer as the dict its JSON is (what output.py formats)."""
    found: dict[str, Any] = msgspec.to_builtins(value)
    return found


def print_json(value: Any, out: TextIO) -> None:
    """A typed answer (or a list, a dict of them) as JSON, indented."""
    out.write(json.dumps(msgspec.to_builtins(value), indent=2) + "\n")


def attempts_of(client: Client, job_id: str) -> list[Attempt]:
    """The job's ended attempts, oldest first ([] from a scheduler that keeps none)."""
    try:
        return client.attempts(job_id)
    except NotFound:
        return []


class _Changes:
    """Writes a progress line each time the waited job's status differs from the last seen,
    after a line for each attempt that ended since (with a `client` to read them from) but
    the one that ended the job, which its own line says (`job-3 done on node-1
    (exit_code=0)` after `attempt 1 ... done (exit_code=0)` said it twice); `said`: whether
    the last status seen has had its line."""

    def __init__(self, err: TextIO, status: str = "", client: Client | None = None) -> None:
        self.err, self.status, self.client, self.shown = err, status, client, 0
        self.said = False

    def __call__(self, job: Job) -> None:
        if job.status != self.status:
            self.status = job.status
            if self.client is not None:
                ended = attempts_of(self.client, job.job_id)
                last = len(ended) - 1 if job.status in FINAL else len(ended)
                for attempt in ended[self.shown : last]:
                    _echo(attempt_line(job.job_id, fields(attempt)), self.err)
                self.shown = len(ended)
            _echo(progress(fields(job)), self.err)
            self.said = True


def usage_error(args: argparse.Namespace, message: str) -> None:
    """A usage error, as argparse says one (the usage, the message, exit 2): the options
    given do not go together."""
    error: Callable[[str], None] | None = getattr(args, "usage_error", None)
    if error is None:
        raise ClientError(f"error: {message}", exit_status=USAGE)
    error(message)


def _watched(
    client: Client,
    job_id: str,
    poll_secs: float,
    each: Callable[[Job], None],
    until: Callable[[Job], bool] | None = None,
) -> Job:
    """The job once `until` says so (default: once it ended), `each` told of it at every
    read (a long-poll, answered as soon as its status changes)."""
    job: Job | None = None
    for job in client.watch(job_id, until=until, poll_secs=poll_secs):
        each(job)
    assert job is not None  # a watch yields the job at least once
    return job


def submit(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    if args.from_file is not None or args.count is not None:
        from scheduler.cli.batch import submit_many  # it imports this module

        return submit_many(args, client, out, err)
    body, key = job_body(args), idempotency_key(args.idempotency_key)
    if "command" not in body:
        usage_error(args, "the following arguments are required: command (or --from FILE)")
    with submitting():
        job = client.submit(idempotency_key=key, **body)
    if not args.json:
        where = f"on node {job.node_id}" if job.node_id else "on no node yet"
        reason = f", pending_reason={job.pending_reason}" if job.pending_reason else ""
        # With --wait stdout is the job's output (`out=$(scheduler submit CMD --wait)`): the
        # line is one of the status lines then; without, scripts read the id from stdout.
        said_on = err if args.wait else out
        said_on.write(f"submitted {job.job_id} {where} (status={job.status}{reason})\n")
    elif not args.wait:
        print_json(job, out)
    out.flush()
    # A job no node can take now, for a reason that does not pass as jobs end: said at once
    # (stderr: stdout is what scripts read), rather than found pending later.
    _echo(unplaced_warning(fields(job)), err)
    # A job it runs after had failed, say; its own command's failure the wait says below.
    if job.failure_reason or not args.wait:
        _echo(ended_warning(fields(job)), err)
    if not args.wait:
        return 1 if job.status == "failed" else 0
    args.on_interrupt = keeps_running(job.job_id)
    changes = _Changes(err, job.status, client)
    # A service runs until stopped: wait until it has started (or ended).
    if body.get("job_type") == "service":
        started = lambda j: j.status != "pending"  # noqa: E731
        job = _watched(client, job.job_id, args.poll_secs, changes, started)
        if args.json:
            print_json(job, out)
        else:
            out.write(format_job(fields(job)))
        return 1 if job.status == "failed" else 0
    job = _watched(client, job.job_id, args.poll_secs, changes)
    if not changes.said:  # it had ended when submitted (an Idempotency-Key's job, again)
        _echo(progress(fields(job)), err)
    if args.json:
        print_json(job, out)
    else:
        # The end was said once, as it came (`job-3 failed on node-1 (exit_code=3)`).
        out.write(job.stdout)
        err.write(job.stderr)
    return exit_status(fields(job))  # the command's own


def status(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """The job; with --wait, a progress line on stderr at each status change, the job on
    stdout each time it reads otherwise than last printed (or the JSON at the end), and the
    exit code of submit --wait: the command's own.

    The original CLI printed the job at every poll and exited 0 however the job ended.
    CONTRACT 7 binds the scheduler's wire to it, not this CLI's lines: every 2 s the same
    job again (9 times in 15 s) buried the change, and exit 0 for a failed job made
    `status --wait && next` go on after a failure."""
    if not args.wait:
        job = client.job(args.job_id)
        if not args.json:
            line, _, blocks = format_job(fields(job)).partition("\n")
            # Its place right under its line: after a retry's stdout and stderr blocks it
            # read as their last line.
            _echo(f"{line}\n{_place_line(client, job)}{blocks}", out)
    else:
        args.on_interrupt = keeps_running(args.job_id)
        changes = _Changes(err)
        printed = ""

        def each(job: Job) -> None:
            nonlocal printed
            changes(job)
            text = "" if args.json else format_job(fields(job))
            if text != printed:
                _echo(text, out)
                printed = text

        job = _watched(client, args.job_id, args.poll_secs, each)
    attempts = attempts_of(client, args.job_id) if args.attempts else []
    if args.json:
        # --attempts in the JSON too: the job's fields and its attempts, one object.
        print_json({**fields(job), "attempts": attempts} if args.attempts else job, out)
    else:
        for attempt in attempts:
            out.write(attempt_line(args.job_id, fields(attempt)))
    return exit_status(fields(job)) if args.wait else 0


def _place_line(client: Client, job: Job) -> str:
    """A pending job's place in its queue, a line (GET /jobs/{id}/place; "" for any other
    job, or from a scheduler that does not say it): why it has not started."""
    if job.status != "pending":
        return ""
    try:
        place = client.place(job.job_id)
    except NotFound:
        return ""
    words = in_words(place, job.node_id, job.pending_reason)
    return f"queue: {words}\n" if words else ""


def _echo(text: str, out: TextIO) -> None:
    out.write(text)
    out.flush()


def _common(parser: argparse.ArgumentParser, poll: bool = True, json_option: bool = True) -> None:
    if json_option:
        parser.add_argument("--json", action="store_true", help="print the scheduler's JSON")
    parser.add_argument("--scheduler-url", default="", help="default: $SCHEDULER_URL")
    if poll:
        parser.add_argument(
            POLL_FLAG,
            type=_poll_secs,
            default=2.0,
            metavar="S",
            help="--wait polls this often (default 2)",
        )


POLL_FLAG = "--poll-secs"


def _poll_secs(text: str) -> float:
    """--poll-secs: read when the options are (argparse's usage error, exit 2), not by the
    scheduler's first wait: after a submit, which a retry would make again."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: use a number of seconds above 0, e.g. 2")
    return value


def _job_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's id, e.g. job-1")


# The most jobs one `submit --count N` or `--from FILE` makes, as Slurm's MaxArraySize: a
# mistyped count is a usage error, not 100,000 jobs.
MAX_ARRAY_SIZE = 10_000
ARRAY_SIZE_RULE = (
    f"the most jobs a submit makes is {MAX_ARRAY_SIZE}: split the array into several "
    "submits (each with its own --idempotency-key)"
)


def _array_size(text: str) -> int:
    """--count: 1 to MAX_ARRAY_SIZE."""
    value = _positive(text)
    if value > MAX_ARRAY_SIZE:
        raise argparse.ArgumentTypeError(f"{value} is too many: {ARRAY_SIZE_RULE}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("submit", help="submit a job: scheduler submit 'echo hello' --wait")
    add_job_options(p, optional_command=True)
    p.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="many jobs: a JSON job (the POST /jobs body) a line, `-` for stdin, at most "
        f"{MAX_ARRAY_SIZE}; the job options are each line's defaults. Prints each id, each "
        "error with its line",
    )
    p.add_argument(
        "--count",
        type=_array_size,
        metavar="N",
        help="an array: N copies of the job, each with TASK_INDEX (0..N-1) and TASK_COUNT "
        f"in its env (as Slurm's SLURM_ARRAY_TASK_ID), N at most {MAX_ARRAY_SIZE}; prints each id",
    )
    p.add_argument(
        "--idempotency-key",
        default="",
        metavar="KEY",
        help="the same key: the same job (with --from or --count: the same jobs)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the end (status changes on stderr), print its output; with --from or "
        "--count: each job's end, then how many ended done",
    )
    _common(p)
    p.set_defaults(handler=_handler(submit), usage_error=p.error, job_prog=p.prog)

    p = sub.add_parser("status", help="show a job: scheduler status job-1 [--wait]")
    _job_id(p)
    p.add_argument(
        "--wait",
        action="store_true",
        help="poll until it ends: the job again on stdout only when it changed, each status "
        "change on stderr; exits with the command's exit code, as submit --wait",
    )
    p.add_argument("--attempts", action="store_true", help="then each attempt, as it ended")
    _common(p)
    p.set_defaults(handler=_handler(status))

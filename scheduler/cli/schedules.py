"""`scheduler schedule add|list|show|pause|resume|delete`: the /schedules API (README,
Schedules) from the command line, through scheduler.client's `Client`; output as the other
commands': one line saying what happened, a table for `list`, the JSON with `--json`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import TextIO
from zoneinfo import ZoneInfo

from scheduler.cli.client import Command, _common, _handler, print_json
from scheduler.cli.job_options import add_job_options, job_body, whole_seconds
from scheduler.cli.output import table
from scheduler.cli.refusals import submitting
from scheduler.client import Client, Schedule
from scheduler.models.schedule import NOT_IN_TEMPLATE
from scheduler.models.wire import parse_rfc3339


def when(schedule: Schedule) -> str:
    """`cron "0 3 * * *" Europe/Paris` or `every 60s`."""
    if schedule.cron:
        return f'cron "{schedule.cron}" {schedule.timezone or "UTC"}'
    return f"every {schedule.every_secs or '?'}s"


def _next(schedule: Schedule) -> str:
    """`2026-12-07 03:00:00 CET`: the next run in the schedule's own time zone, as its cron
    reads (the API's next_run_at is UTC to the microsecond); `-` for none (paused)."""
    if not schedule.next_run_at:
        return "-"
    zone = ZoneInfo(schedule.timezone or "UTC")
    at = datetime.fromtimestamp(parse_rfc3339(schedule.next_run_at), zone)
    return f"{at:%Y-%m-%d %H:%M:%S} {at.tzname()}"


def next_run(schedule: Schedule) -> str:
    """`next run 2026-12-07 03:00:00 CET`, or `no next run while paused` (not `next run -`)."""
    if schedule.paused or not schedule.next_run_at:
        return "no next run while paused" if schedule.paused else "no next run"
    return f"next run {_next(schedule)}"


def add(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    job = job_body(args)
    with submitting():
        schedule = client.add_schedule(
            args.name,
            job,
            cron=args.cron,
            every_secs=0 if args.cron else args.every,
            timezone=args.tz,
            catchup=args.catchup,
            paused=args.paused,
        )
    if args.json:
        print_json(schedule, out)
    else:
        out.write(f"added schedule {args.name}: {when(schedule)}, {next_run(schedule)}\n")
    return 0


def list_schedules(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    found = list(client.schedules())
    if args.json:
        print_json(found, out)
        return 0
    rows = [("NAME", "WHEN", "STATE", "NEXT RUN", "LAST JOB", "COMMAND")]
    for s in found:
        state = "paused" if s.paused else "active"
        command = str(s.job.get("command") or s.job.get("deploy_url") or "")
        rows.append((s.name, when(s), state, _next(s), s.last_job_id or "-", command))
    table(rows, out)
    return 0


def show(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    print_json(client.schedule(args.name), out)
    return 0


def _change(done: str, call: Callable[[Client, str], Schedule], pausing: bool) -> Command:
    """Pause or resume (`pausing`: which), said as done or as it already was: the answer
    does not say whether it changed, so the schedule is read first."""

    def change(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
        was = client.schedule(args.name).paused
        schedule = call(client, args.name)  # sent all the same: the key's refusal is said
        if args.json:
            print_json(schedule, out)
        elif was == pausing:
            state = "already paused" if pausing else "not paused"
            out.write(f"schedule {args.name} was {state}, {next_run(schedule)}\n")
        else:
            out.write(f"{done} schedule {args.name}, {next_run(schedule)}\n")
        return 0

    return change


def delete(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    client.delete_schedule(args.name)
    out.write(f"deleted schedule {args.name}\n")
    return 0


def every(text: str) -> int:
    """--every: whole seconds, at least one (30, 5m, 1h)."""
    value = whole_seconds(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1 s")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schedule", help="named schedules: scheduler schedule add|list|pause ...")
    actions = p.add_subparsers(
        dest="action",
        required=True,
        metavar="ACTION",
        help="add, list, show, pause, resume, delete",
    )

    a = actions.add_parser(
        "add", help="scheduler schedule add NAME (--cron EXPR | --every SECS) COMMAND"
    )
    a.add_argument("name", metavar="NAME", help="the schedule's name (A-Z a-z 0-9 . _ -)")
    how = a.add_mutually_exclusive_group(required=True)
    how.add_argument("--cron", default="", metavar="EXPR", help='5 fields, e.g. "0 3 * * *"')
    how.add_argument(
        "--every",
        type=every,
        default=0,
        metavar="SECS",
        help="fixed interval: seconds, or 30s, 5m, 1h",
    )
    a.add_argument("--tz", default="", metavar="TZ", help="the cron's IANA time zone (UTC)")
    a.add_argument(
        "--catchup",
        choices=("skip", "once"),
        default="skip",
        help="missed ticks after an outage: skip them (default) or run once for them",
    )
    a.add_argument("--paused", action="store_true", help="create it paused")
    jobs = a.add_argument_group("each job's options (as submit's)")
    add_job_options(jobs, omit=NOT_IN_TEMPLATE)
    _common(a, poll=False)
    a.set_defaults(handler=_handler(add), usage_error=a.error, job_prog=f"{a.prog} NAME ...")

    a = actions.add_parser("list", help="every schedule: name, when, state, next run, last job")
    _common(a, poll=False)
    a.set_defaults(handler=_handler(list_schedules))

    for name, command, text in (
        ("show", show, "a schedule's JSON"),
        ("pause", _change("paused", Client.pause_schedule, True), "no tick fires until resumed"),
        ("resume", _change("resumed", Client.resume_schedule, False), "active again from now"),
        ("delete", delete, "delete it (its jobs stay)"),
    ):
        a = actions.add_parser(name, help=text)
        a.add_argument("name", metavar="NAME", help="the schedule's name")
        _common(a, poll=False)
        a.set_defaults(handler=_handler(command))

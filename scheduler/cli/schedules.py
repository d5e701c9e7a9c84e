"""`scheduler schedule add|list|show|pause|resume|delete`: the /schedules API (README,
Schedules) from the command line. HTTP only, through the client's `Client`; output as the
other commands': one line saying what happened, a table for `list`, the JSON with `--json`."""

from __future__ import annotations

import argparse
from typing import Any, TextIO
from urllib.parse import quote

from scheduler.cli.client import (
    Client,
    ClientError,
    _common,
    _handler,
    _json_object,
    _positive,
    _print_json,
    job_body_of,
)
from scheduler.cli.job_options import add_job_options

PAGE = 1000  # the API's default page of schedules


def _path(name: str, action: str = "") -> str:
    return "/schedules/" + quote(name, safe="") + (f"/{action}" if action else "")


def _checked(response: Any, what: str) -> Any:
    if response.status_code >= 400:
        raise ClientError(f"{what} failed {response.status_code}: {response.text.rstrip()}")
    return response


def when(schedule: dict[str, Any]) -> str:
    """`cron "0 3 * * *" Europe/Paris` or `every 60s`."""
    if schedule.get("cron"):
        return f'cron "{schedule["cron"]}" {schedule.get("timezone", "UTC")}'
    return f"every {schedule.get('every_secs', '?')}s"


def _next(schedule: dict[str, Any]) -> str:
    return str(schedule.get("next_run_at") or "-")


def add(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    job = job_body_of(args)
    body: dict[str, Any] = {"name": args.name, "catchup": args.catchup, "job": job}
    body |= {"cron": args.cron} if args.cron else {"every_secs": args.every}
    if args.tz:
        body["timezone"] = args.tz
    if args.paused:
        body["paused"] = True
    response = _checked(client.request("POST", "/schedules", json=body), "schedule add")
    schedule = _json_object(response)
    if args.json:
        _print_json(schedule, out)
    else:
        out.write(f"added schedule {args.name}: {when(schedule)}, next run {_next(schedule)}\n")
    return 0


def list_schedules(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    found: list[dict[str, Any]] = []
    after = ""
    while True:
        params = {"limit": str(PAGE), **({"after": after} if after else {})}
        response = _checked(client.request("GET", "/schedules", params=params), "schedule list")
        page = response.json()
        if not isinstance(page, list):
            raise ClientError("decode: the scheduler did not answer with a list of schedules")
        found += page
        if len(page) < PAGE:
            break
        after = str(page[-1].get("name", ""))
    if args.json:
        _print_json(found, out)
        return 0
    rows = [("NAME", "WHEN", "STATE", "NEXT RUN", "LAST JOB", "COMMAND")]
    for s in found:
        state = "paused" if s.get("paused") else "active"
        job = s.get("job") or {}
        command = str(job.get("command") or job.get("deploy_url") or "")
        rows.append((s["name"], when(s), state, _next(s), s.get("last_job_id") or "-", command))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)))
        out.write(f"  {row[5]}\n")
    return 0


def show(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    schedule = _json_object(_checked(client.request("GET", _path(args.name)), "schedule show"))
    _print_json(schedule, out)
    return 0


def _change(action: str, done: str) -> Any:
    def change(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
        response = client.request("POST", _path(args.name, action))
        schedule = _json_object(_checked(response, f"schedule {action}"))
        if args.json:
            _print_json(schedule, out)
        else:
            out.write(f"{done} schedule {args.name}, next run {_next(schedule)}\n")
        return 0

    return change


def delete(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    _checked(client.request("DELETE", _path(args.name)), "schedule delete")
    out.write(f"deleted schedule {args.name}\n")
    return 0


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
    how.add_argument("--every", type=_positive, default=0, metavar="SECS", help="fixed interval")
    a.add_argument("--tz", default="", metavar="TZ", help="the cron's IANA time zone (UTC)")
    a.add_argument(
        "--catchup",
        choices=("skip", "once"),
        default="skip",
        help="missed ticks after an outage: skip them (default) or run once for them",
    )
    a.add_argument("--paused", action="store_true", help="create it paused")
    jobs = a.add_argument_group("each job's options (as submit's)")
    add_job_options(jobs)
    _common(a, poll=False)
    a.set_defaults(handler=_handler(add))

    a = actions.add_parser("list", help="every schedule: name, when, state, next run, last job")
    _common(a, poll=False)
    a.set_defaults(handler=_handler(list_schedules))

    for name, command, text in (
        ("show", show, "a schedule's JSON"),
        ("pause", _change("pause", "paused"), "no tick fires until resumed"),
        ("resume", _change("resume", "resumed"), "active again from now"),
        ("delete", delete, "delete it (its jobs stay)"),
    ):
        a = actions.add_parser(name, help=text)
        a.add_argument("name", metavar="NAME", help="the schedule's name")
        _common(a, poll=False)
        a.set_defaults(handler=_handler(command))
